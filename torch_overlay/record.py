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
    return sha256_field(hashlib.sha256(data).digest())


def sha256_field(digest: bytes) -> str:
    """A sha256 digest in RECORD's form."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_line(path: str, data: bytes) -> str:
    return f"{path},{record_hash(data)},{len(data)}"


@dataclass
class Record:
    """RECORD as an ordered list of raw lines plus an index by path.

    Lines are split on LF only, so a CRLF file keeps its CR in each line and
    renders back byte for byte (installers differ: pip 23.2.1 writes CRLF).
    ``final_newline`` remembers whether the last line was terminated."""

    lines: list[str]
    final_newline: bool = True

    @classmethod
    def parse(cls, text: str) -> "Record":
        """``text`` as stored (decode the bytes; never read it in universal-newline mode)."""
        if not text:
            return cls([], True)
        final = text.endswith("\n")
        return cls((text[:-1] if final else text).split("\n"), final)

    @property
    def _eol(self) -> str:
        """What a new line needs before its LF to look like the rest ("\\r" in a CRLF file)."""
        return "\r" if self.lines and self.lines[0].endswith("\r") else ""

    def render(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.final_newline and self.lines else "")

    @staticmethod
    def _path_of(line: str) -> str:
        if not line.startswith('"'):  # the common, unquoted case without the csv module: RECORD has 10k+ lines
            return line.split(",", 1)[0]
        return next(csv.reader(io.StringIO(line)))[0]

    def _index(self, path: str) -> int | None:
        prefix = path + ","
        for i, line in enumerate(self.lines):  # startswith first: this runs over 10k+ lines per call
            if line.startswith(prefix) or (line.startswith('"') and self._path_of(line) == path):
                return i
        return None

    def find(self, path: str) -> str | None:
        """The line for ``path`` as stored (with its CR in a CRLF file), or None."""
        i = self._index(path)
        return None if i is None else self.lines[i]

    def entries(self) -> dict[str, str]:
        """path -> hash field ('' when RECORD lists the file without a hash)."""
        out = {}
        for row in csv.reader(io.StringIO("\n".join(self.lines))):
            if row:
                out[row[0]] = row[1] if len(row) > 1 else ""
        return out

    def put(self, path: str, data: bytes) -> None:
        """Record ``data`` as the file at ``path``, in a line ending like the file's others."""
        self.replace(path, record_line(path, data) + self._eol)

    def put_unhashed(self, path: str) -> None:
        """List ``path`` without a hash or size (as RECORD lists itself): a file whose bytes change at will,
        such as a link ``develop`` makes to a checkout."""
        self.replace(path, f"{path},," + self._eol)

    def replace(self, path: str, line: str | None) -> None:
        """Replace the line for ``path`` with ``line`` verbatim (append when absent, drop when None)."""
        i = self._index(path)
        if i is not None:
            if line is None:
                del self.lines[i]
            else:
                self.lines[i] = line
        elif line is not None:
            # Keep RECORD's own self-entry ("RECORD,,") last, as installers write it.
            at = next((i for i, l in enumerate(self.lines)
                       if "RECORD," in l and self._path_of(l).endswith("/RECORD")), len(self.lines))
            self.lines.insert(at, line)
