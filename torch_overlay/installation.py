"""The torch installation the running interpreter imports, and its overlay state."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from .errors import OverlayError
from .record import Record, record_hash

STATE_DIR = "overlay"            # inside the dist-info folder
STATE_FILE = "applied.json"
PRISTINE_DIR = "pristine"         # byte-exact copies of the files the overlay replaced
PRISTINE_SUFFIX = ".orig"         # not ".py", so nothing byte-compiles the copies
# What file_problems() finds wrong with a file.
NOT_IN_RELEASE = "not in RECORD"
MISSING = "missing"
DIFFERS = "differs from RECORD"


def base_version(version: str) -> str:
    """'2.5.1+overlay.gabc' -> '2.5.1' (the release the series is for)."""
    return version.split("+", 1)[0]


@dataclass
class TorchInstallation:
    site: Path        # the folder holding torch/
    dist_info: Path   # torch-<version>.dist-info

    @classmethod
    def of_running_interpreter(cls) -> "TorchInstallation":
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            raise OverlayError("this Python has no torch installed", todo="pip install torch==2.5.1")
        site = Path(spec.origin).resolve().parent.parent
        infos = [p for p in site.glob("torch-*.dist-info") if _metadata_name(p) == "torch"]
        if len(infos) != 1:
            raise OverlayError(
                f"expected one torch-*.dist-info folder in {site}, found {len(infos)}",
                unchanged="nothing was changed",
                todo="reinstall torch with pip so its installation record is complete")
        return cls(site, infos[0])

    @property
    def metadata(self):
        return HeaderParser().parsestr((self.dist_info / "METADATA").read_text())

    @property
    def version(self) -> str:
        path = self.dist_info / "METADATA"
        try:
            version = self.metadata["Version"]
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or str(e)
        else:
            if isinstance(version, str) and version.strip():
                return version.strip()
            why = "it has no Version: header"
        raise OverlayError(f"cannot tell torch's version from {path}: {why}",
                           unchanged="nothing was changed",
                           todo="reinstall torch with pip so its installation metadata is complete: "
                                "pip install --force-reinstall --no-deps torch==<the release you use>") from None

    @property
    def release(self) -> str:
        return base_version(self.version)

    @property
    def reinstall_command(self) -> str:
        """The pip command that puts the pristine release back (also when METADATA is damaged)."""
        try:
            release = self.release
        except OverlayError:
            release = "<the release you use>"
        return f"pip install --force-reinstall --no-deps torch=={release}"

    @property
    def record_path(self) -> Path:
        return self.dist_info / "RECORD"

    def record(self) -> Record:
        """RECORD as stored: decoded, never newline-translated, so it can be written back byte for byte."""
        try:
            return Record.parse(self.record_path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise OverlayError(
                f"cannot read torch's installation record {self.record_path}: {getattr(e, 'strerror', None) or e}",
                unchanged="nothing was changed",
                todo=f"reinstall torch: {self.reinstall_command}") from None

    def relpath(self, path: Path) -> str:
        return path.relative_to(self.site).as_posix()

    @property
    def state_dir(self) -> Path:
        return self.dist_info / STATE_DIR

    def applied_state(self) -> dict | None:
        """The overlay's ``applied.json``, checked for the fields the commands use; None when absent."""
        p = self.state_dir / STATE_FILE
        if not p.exists() and not self.state_dir.exists():
            return None
        if self.state_left_behind():
            raise OverlayError(
                f"the overlay state {self.state_dir} is not in torch's installation record, so it describes none "
                "of the installed files: an interrupted torch-overlay command left it, and torch was reinstalled "
                "over it", unchanged="nothing was changed; torch's files are as its RECORD lists them",
                todo=f"remove it (rm -r {self.state_dir}), then run 'torch-overlay apply' to patch torch")
        try:
            state = json.loads(p.read_bytes())
            files = state["files"]
            ok = (all(isinstance(state[k], str) for k in ("torch_version", "series_digest", "label"))
                  and isinstance(state["patches"], list) and all(isinstance(x, str) for x in state["patches"])
                  and isinstance(state.get("forced", False), bool)
                  and isinstance(files, dict) and all(_file_entry_ok(f) for f in files.values()))
        except (OSError, ValueError, TypeError, KeyError) as e:
            ok, why = False, getattr(e, "strerror", None) or f"{type(e).__name__}: {e}"
        else:
            why = "a field is missing or of the wrong type"
        if not ok:
            raise OverlayError(
                f"the overlay state {p} is unreadable ({why})",
                unchanged="nothing was changed",
                todo=f"reinstall torch, which also removes the overlay state: {self.reinstall_command}")
        return state

    def state_left_behind(self) -> bool:
        """Whether the overlay state folder is there but torch's RECORD does not list its applied.json.

        apply and rebuild-wheel list every state file in RECORD, in the same transaction that writes them,
        and pip's uninstall removes exactly what RECORD lists. A state folder RECORD does not list was moved
        in by an apply killed before its new RECORD was, and pip then reinstalled torch around it: it claims
        a patch that the installed files do not have. (An unreadable RECORD is reported on its own.)"""
        if not self.state_dir.exists():
            return False
        try:
            record = self.record()
        except OverlayError:
            return False
        return record.find(self.relpath(self.state_dir / STATE_FILE)) is None

    def pristine_copy(self, path: str) -> Path:
        return self.state_dir / PRISTINE_DIR / (path + PRISTINE_SUFFIX)

    def file_problems(self, paths: list[str]) -> dict[str, str]:
        """{path: what is wrong} for those of ``paths`` that are not as RECORD lists them."""
        entries = self.record().entries()
        out = {}
        for p in paths:
            f = self.site / p
            if p not in entries:
                out[p] = NOT_IN_RELEASE
            elif not f.is_file():
                out[p] = MISSING
            elif record_hash(f.read_bytes()) != entries[p]:
                out[p] = DIFFERS
        return out

    def modified_files(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` that are not as RECORD lists them (missing counts)."""
        return list(self.file_problems(paths))


def _is_hash(value) -> bool:
    return isinstance(value, str) and value.startswith("sha256=")


def _file_entry_ok(entry) -> bool:
    """One ``files`` entry of applied.json: the patched file's hash, and the pristine file's hash and RECORD
    line, both None for a file the series created."""
    if not isinstance(entry, dict) or not {"pristine", "patched", "record_line"} <= entry.keys():
        return False
    created = entry["pristine"] is None
    return (_is_hash(entry["patched"]) and (created or _is_hash(entry["pristine"]))
            and (isinstance(entry["record_line"], str) or created and entry["record_line"] is None))


def _metadata_name(dist_info: Path) -> str | None:
    try:
        return HeaderParser().parsestr((dist_info / "METADATA").read_text())["Name"]
    except OSError:
        return None
