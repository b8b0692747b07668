"""Pristine bytes of a torch release's files, each verified against a RECORD.

Two sources serve every command that needs the release's own files: a wheel
file (verified against the wheel's RECORD), or the installed torch (verified
against the installation's RECORD, or taken from the saved originals when an
overlay is applied).
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Callable

from .errors import OverlayError
from .installation import TorchInstallation
from .record import Record, record_hash

PristineReader = Callable[[str], bytes]


class MissingReleaseFile(OverlayError):
    """The release has no file at that path (it may have moved: see patches/moved-files)."""


def wheel_dist_info(names: list[str]) -> str:
    infos = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(infos) != 1:
        raise OverlayError(f"expected one .dist-info folder in the wheel, found {sorted(infos) or 'none'}")
    return infos.pop()


def read_member(zf: zipfile.ZipFile, name: str, wheel_name: str) -> bytes:
    """A member's bytes; a member whose data is damaged is an error naming it (a missing one: KeyError)."""
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise OverlayError(f"{name} in {wheel_name} cannot be read ({e}); the wheel is damaged",
                           unchanged="nothing was written", todo="download it again") from None


def from_wheel(wheel: Path) -> PristineReader:
    zf = zipfile.ZipFile(wheel)
    record_name = f"{wheel_dist_info(zf.namelist())}/RECORD"
    try:
        record = Record.parse(read_member(zf, record_name, wheel.name).decode()).entries()
    except UnicodeDecodeError as e:
        raise OverlayError(f"{record_name} in {wheel.name} is not text ({e}); the wheel is damaged",
                           unchanged="nothing was written", todo="download it again") from None

    def read(path: str) -> bytes:
        try:
            data = read_member(zf, path, wheel.name)
        except KeyError:
            raise MissingReleaseFile(f"{wheel.name} has no {path}") from None
        if record.get(path) != record_hash(data):
            raise OverlayError(f"{path} in {wheel.name} does not match the wheel's RECORD; the wheel is damaged",
                               todo="download it again")
        return data

    return read


def from_installation(inst: TorchInstallation, release: str) -> PristineReader:
    if inst.release != release:
        raise OverlayError(f"the installed torch is {inst.version}, not {release}",
                           todo=f"pass --wheel with a torch {release} wheel ('pip download torch=={release} --no-deps')")
    from .inplace import finish_interrupted
    finish_interrupted()  # an interrupted apply or revert is finished first, as every command does
    state = inst.applied_state() or {"files": {}}
    entries = inst.record().entries()

    def read(path: str) -> bytes:
        saved = state["files"].get(path)
        if saved is not None:
            data = inst.pristine_copy(path).read_bytes()
            expected = saved["pristine"]
        else:
            if not (inst.site / path).is_file():
                raise MissingReleaseFile(f"the installed torch {release} has no file {path}",
                                   todo=f"reinstall torch {release}, or pass --wheel with a torch {release} wheel")
            data = (inst.site / path).read_bytes()
            expected = entries.get(path)
        if record_hash(data) != expected:
            raise OverlayError(f"the installed {path} is not the release's file (it differs from RECORD)",
                               todo=f"pass --wheel with a torch {release} wheel, or reinstall torch")
        return data

    return read


def fetch_wheel(version: str, folder: Path) -> Path:
    """The release's wheel from the package registry, downloaded once into ``folder``.

    pip downloads into a private folder beside the cache and the wheel is moved in whole, under a lock: a
    concurrent caller waits, and no caller ever sees a partly written wheel."""
    import os
    import subprocess
    import sys
    import tempfile

    from .cache_lock import cache_lock

    def wheels() -> list[Path]:
        # torch-2.5.1-cp311-..., torch-2.10.0-3-cp311-... (build tag), torch-2.13.0+cpu-cp311-... (local label)
        return sorted(p for p in folder.glob(f"torch-{version}*.whl")
                      if p.name[len(f"torch-{version}"):][:1] in ("-", "+"))

    with cache_lock(folder / f".torch-{version}.lock"):
        found = wheels()
        if not found:
            with tempfile.TemporaryDirectory(prefix=f".torch-{version}-", dir=folder) as partial:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"torch=={version}", "--no-deps",
                                "--only-binary", ":all:", "-d", partial], check=True,
                               # A pip constraint capping torch (as on some machines) is about installs, not this read.
                               env={**os.environ, "PIP_CONSTRAINT": "/dev/null"})
                for wheel in Path(partial).glob("torch-*.whl"):
                    wheel.rename(folder / wheel.name)
            found = wheels()
    if not found:
        raise OverlayError(f"pip did not download a torch {version} wheel into {folder}")
    return found[0]
