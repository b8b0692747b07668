"""Reading and editing a wheel's RECORD file without disturbing untouched lines.

RECORD is edited line by line so that reverting restores it byte for byte:
lines we do not own are kept verbatim, and the lines we replace are stored
(in the overlay state) exactly as they were.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass


def record_hash(data: bytes) -> str:
    """The ``sha256=<urlsafe-b64, no padding>`` form RECORD uses."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_line(path: str, data: bytes) -> str:
    return f"{path},{record_hash(data)},{len(data)}"


@dataclass
class Record:
    """RECORD as an ordered list of raw lines plus an index by path."""

    lines: list[str]
    newline: str = "\n"

    @classmethod
    def parse(cls, text: str) -> "Record":
        newline = "\r\n" if "\r\n" in text else "\n"
        body = text[: -len(newline)] if text.endswith(newline) else text
        return cls(body.split(newline) if body else [], newline)

    def render(self) -> str:
        return "".join(line + self.newline for line in self.lines)

    @staticmethod
    def _path_of(line: str) -> str:
        return next(csv.reader(io.StringIO(line)))[0] if line else ""

    def find(self, path: str) -> str | None:
        for line in self.lines:
            if self._path_of(line) == path:
                return line
        return None

    def entries(self) -> dict[str, str]:
        """path -> hash field ('' when RECORD lists the file without a hash)."""
        out = {}
        for row in csv.reader(io.StringIO("\n".join(self.lines))):
            if row:
                out[row[0]] = row[1] if len(row) > 1 else ""
        return out

    def replace(self, path: str, new_line: str | None) -> None:
        """Replace the line for ``path`` (append when absent, drop when None)."""
        for i, line in enumerate(self.lines):
            if self._path_of(line) == path:
                if new_line is None:
                    del self.lines[i]
                else:
                    self.lines[i] = new_line
                return
        if new_line is not None:
            # Keep RECORD's own self-entry ("RECORD,,") last, as installers write it.
            at = next((i for i, l in enumerate(self.lines) if self._path_of(l).endswith("/RECORD")), len(self.lines))
            self.lines.insert(at, new_line)
