"""Looking at a scratch torch from outside the tool, for the fault tests and bench/fault_campaign.py.

A state is read by hashing every file an overlay command may replace (the
series' targets, torch/__init__.py, the dist-info folder) and compared with
the pristine and the patched state captured once; a target's bytecode is not
hashed (it holds its source's mtime) but checked to be valid for its source.
``import torch`` is tried in a fresh process: it must be refused while the
files are mixed and must give the right torch when they are not.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from scratch_torch import ScratchTorch

BARRIER = "torch/__init__.py"
REFUSAL = "torch cannot be imported now"
PROBE = "import torch, torch.fx.traceback as t; print('patched' if hasattr(t, 'annotate') else 'pristine')"
# A job that imports torch, waits for a line, then imports torch._dynamo, which imports more of the files a series
# changes, and says which torch it holds: 'patched' or 'pristine' when its torch.fx (imported with torch) and its
# torch._dynamo (imported now; the 2.5.1 series adds a config to it) agree, else 'mixed ...'. Old torch.fx under a
# new torch._dynamo fails at the import (AttributeError: ... 'annotate'); the other mix imports silently.
LATE_JOB = ("import sys, torch; print('loaded', flush=True); sys.stdin.readline(); "
            "import torch._dynamo, torch.fx.traceback as t; "
            "fx = 'patched' if hasattr(t, 'annotate') else 'pristine'; "
            "dynamo = 'patched' if hasattr(torch._dynamo.config, 'trace_under_caller_annotation') else 'pristine'; "
            "print(fx if fx == dynamo else f'mixed: torch.fx {fx}, torch._dynamo {dynamo}')")


def bytecode_of(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def bytecode_is_valid(source: Path) -> bool:
    """The .pyc Python would use for ``source`` without compiling again (timestamp-based pycs)."""
    pyc = bytecode_of(source)
    if not pyc.is_file():
        return False
    head = pyc.read_bytes()[:16]
    if len(head) < 16:
        return False
    _, flags, mtime, size = struct.unpack("<4sIII", head)
    st = source.stat()
    return flags != 0 or (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)


@dataclass
class Snapshot:
    hashes: dict[str, str]   # path relative to site -> sha256 of the files a command may replace
    files: set[str]          # every file in the folders a command writes to (for stray files)


def watched_folders(scratch: ScratchTorch) -> list[Path]:
    folders = {scratch.site / "torch", scratch.dist_info}
    for path in [*scratch.targets, *scratch.created]:
        folders.add((scratch.site / path).parent)
    return sorted(folders | {f / "__pycache__" for f in folders})


def snapshot(scratch: ScratchTorch) -> Snapshot:
    hashes = {}
    for path in [*scratch.targets, *scratch.created, BARRIER]:
        f = scratch.site / path
        hashes[path] = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "absent"
    for f in scratch.dist_info.rglob("*"):
        if f.is_file() and "overlay-txn" not in f.relative_to(scratch.dist_info).parts:
            hashes[f.relative_to(scratch.site).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    files = set()
    for folder in watched_folders(scratch):
        if folder == scratch.dist_info:
            files |= {f.relative_to(scratch.site).as_posix() for f in folder.rglob("*")}
        elif folder.is_dir():
            files |= {f.relative_to(scratch.site).as_posix() for f in folder.iterdir() if not f.is_dir()}
    return Snapshot(hashes, files)


def classify(now: Snapshot, pristine: Snapshot, patched: Snapshot) -> str:
    if now.hashes == pristine.hashes:
        return "pristine"
    if now.hashes == patched.hashes:
        return "patched"
    return "mixed"


def stray_files(now: Snapshot, expected: Snapshot) -> list[str]:
    """Files present now that the state we are in does not have (a staging folder, a .pyc.<id>, ...)."""
    return sorted(now.files - expected.files)


def stale_bytecode(scratch: ScratchTorch) -> list[str]:
    return [p for p in scratch.targets if not bytecode_is_valid(scratch.site / p)]


def import_probe(scratch: ScratchTorch) -> str:
    """'refused', 'pristine' or 'patched' as a fresh process importing torch sees it (else the error)."""
    proc = subprocess.run([str(scratch.python), "-c", PROBE], capture_output=True, text=True)
    if proc.returncode == 0:
        return proc.stdout.strip()
    if REFUSAL in proc.stderr:
        return "refused"
    return "error: " + proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"


class Saved:
    """A copy (with mtimes, so bytecode stays valid) of every file in the watched folders, to put a
    scratch back into a captured state quickly between fault trials."""

    def __init__(self, scratch: ScratchTorch, where: Path):
        self.scratch, self.where = scratch, where
        self.files = snapshot(scratch).files
        for rel in self.files:
            src = scratch.site / rel
            if src.is_file():
                (where / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, where / rel)

    def restore(self) -> None:
        site = self.scratch.site
        shutil.rmtree(self.scratch.dist_info / "overlay-txn", ignore_errors=True)
        for rel in sorted(snapshot(self.scratch).files - self.files):
            p = site / rel
            if not os.path.lexists(p):  # inside a folder removed just before
                continue
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for rel in self.files:
            saved, p = self.where / rel, site / rel
            if not saved.is_file():
                p.mkdir(parents=True, exist_ok=True)
                continue
            # Every write here is a rename, so a file with the saved size and mtime is the saved file.
            a, b = (os.stat(p) if p.is_file() else None), os.stat(saved)
            if a is None or (a.st_size, a.st_mtime_ns) != (b.st_size, b.st_mtime_ns):
                p.parent.mkdir(parents=True, exist_ok=True)
                tmp = p.with_name(p.name + ".restoring")
                shutil.copy2(saved, tmp)
                os.replace(tmp, p)


def small_release_wheel_of(real: Path, path: Path) -> Path:
    """A torch 2.5.1 wheel at ``path`` holding the real wheel's dist-info, the series' targets and a few other
    real members, with a RECORD for exactly those: rebuild-wheel's every step in a second."""
    from torch_overlay.series import load_series

    targets = set(load_series("2.5.1").touched)
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        dist = next(n.split("/")[0] for n in src.namelist() if n.split("/")[0].endswith(".dist-info"))
        keep = [i for i in src.infolist() if not i.is_dir() and (
            i.filename.startswith(dist + "/") or i.filename in targets
            or i.filename in ("torch/__init__.py", "torch/version.py", "torch/fx/__init__.py"))]
        names = {i.filename for i in keep}
        record = [line for line in src.read(f"{dist}/RECORD").decode().splitlines()
                  if line.split(",", 1)[0] in names]
        for info in keep:
            data = "\n".join(record).encode() + b"\n" if info.filename == f"{dist}/RECORD" else src.read(info)
            out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return path


def damage_member(wheel: Path, dest: Path, member: str) -> Path:
    """A copy of ``wheel`` with one byte of ``member``'s compressed data flipped."""
    shutil.copy(wheel, dest)
    with zipfile.ZipFile(dest) as zf:
        info = zf.getinfo(member)
    with open(dest, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        at = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return dest


@dataclass
class WindowTrial:
    command: subprocess.CompletedProcess  # the overlay command
    job_pid: int | None                   # the job that loaded torch while the command was stopped
    job_saw: str                          # 'pristine' or 'patched' (its torch once the command ended), or the error


def _wait_stopped(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop at its failpoint")
        time.sleep(0.01)


def load_torch_during(scratch: ScratchTorch, args: list[str], point: str, env: dict | None = None) -> WindowTrial:
    """Run ``torch-overlay ARGS`` and stop it at failpoint ``point`` (``<point>:pause``, SIGSTOP); meanwhile a job
    (LATE_JOB) imports torch; then the command goes on, and once it has ended the job imports torch._dynamo."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    full_env.update(env or {})
    full_env["TORCH_OVERLAY_FAILPOINT"] = f"{point}:pause"
    cmd = subprocess.Popen([str(scratch.python), "-m", "torch_overlay", *args], env=full_env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job = None
    try:
        first = cmd.stderr.readline()
        if f"failpoint {point} reached" not in first:
            out, err = cmd.communicate(timeout=600)
            return WindowTrial(subprocess.CompletedProcess(args, cmd.returncode, out, first + err), None,
                               f"not run: the command did not reach {point}")
        _wait_stopped(cmd.pid)
        job_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
        job = subprocess.Popen([str(scratch.python), "-c", LATE_JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=job_env)
        loaded = job.stdout.readline()
        os.kill(cmd.pid, signal.SIGCONT)
        out, err = cmd.communicate(timeout=600)
        proc = subprocess.CompletedProcess(args, cmd.returncode, out, err)  # after the failpoint's line
        if loaded != "loaded\n":
            return WindowTrial(proc, job.pid, f"the job could not import torch: {job.communicate()[1][-300:]}")
        job_out, job_err = job.communicate("\n", timeout=600)
        saw = job_out.strip() if job.returncode == 0 else \
            "error: " + (job_err.strip().splitlines() or [f"exit {job.returncode}"])[-1]
        return WindowTrial(proc, job.pid, saw)
    finally:
        for p in (cmd, job):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
