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
        return self.metadata["Version"]

    @property
    def release(self) -> str:
        return base_version(self.version)

    @property
    def record_path(self) -> Path:
        return self.dist_info / "RECORD"

    def record(self) -> Record:
        return Record.parse(self.record_path.read_text())

    def relpath(self, path: Path) -> str:
        return path.relative_to(self.site).as_posix()

    @property
    def state_dir(self) -> Path:
        return self.dist_info / STATE_DIR

    def applied_state(self) -> dict | None:
        p = self.state_dir / STATE_FILE
        return json.loads(p.read_text()) if p.exists() else None

    def pristine_copy(self, path: str) -> Path:
        return self.state_dir / PRISTINE_DIR / (path + PRISTINE_SUFFIX)

    def modified_files(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` whose bytes differ from RECORD (missing counts)."""
        entries = self.record().entries()
        out = []
        for p in paths:
            f = self.site / p
            if p not in entries or not f.is_file() or record_hash(f.read_bytes()) != entries[p]:
                out.append(p)
        return out


def _metadata_name(dist_info: Path) -> str | None:
    try:
        return HeaderParser().parsestr((dist_info / "METADATA").read_text())["Name"]
    except OSError:
        return None
