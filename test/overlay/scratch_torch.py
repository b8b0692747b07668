"""Throwaway torch installations for testing the apply tool against real torch files.

Copying a whole CUDA torch (several GB) per test is too slow, so a scratch
installation is a fresh venv whose ``torch/`` tree hard-links the repo
``.venv``'s files.  Every file an overlay command may replace (the series'
targets and the dist-info folder) is a private copy, and the overlay tool only
ever replaces files by rename, so nothing written in a scratch reaches the
shared ``.venv``.  Pristineness is checked against the real wheel's RECORD.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"


def site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def installed_release(venv: Path = VENV) -> str:
    """The torch release in ``venv`` (scripts/setup.sh --torch X puts it there), without importing torch."""
    (dist_info,) = site_packages(venv).glob("torch-*.dist-info")
    return dist_info.name[len("torch-"):-len(".dist-info")].split("+")[0]


# The tool's tests run against whichever release .venv holds, with that release's series.
TORCH_RELEASE = installed_release()


def torch_wheel(version: str = TORCH_RELEASE) -> Path:
    """The real torch wheel from the registry, downloaded once into build/wheels."""
    from torch_overlay.pristine import fetch_wheel

    return fetch_wheel(version, REPO / "build" / "wheels")


class ScratchTorch:
    def __init__(self, root: Path):
        from torch_overlay.pristine import from_wheel
        from torch_overlay.series import load_series

        self.root = root
        self.venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True)
        self.site = site_packages(self.venv)
        shared = site_packages(VENV)
        subprocess.run(["cp", "-al", str(shared / "torch"), str(self.site / "torch")], check=True)
        (dist_info,) = shared.glob("torch-*.dist-info")
        shutil.copytree(dist_info, self.site / dist_info.name)
        self.dist_info = self.site / dist_info.name
        # torch_overlay from the checkout; torch's dependencies (and pip) from the shared venv, after ours.
        (self.site / "zz_scratch.pth").write_text(f"{REPO}\n{shared}\n")

        self.series = load_series(TORCH_RELEASE)
        self.targets = [p for p in self.series.touched if p not in self.series.created]
        self.created = sorted(self.series.created)  # absent in the release; apply creates them, revert removes them
        for path in self.targets:  # private copies: tests may edit them in place
            f = self.site / path
            data = f.read_bytes()
            f.unlink()
            f.write_bytes(data)
        if (self.dist_info / "overlay").exists():  # the shared venv is patched: start from the release
            self.run("revert", check=True)
        read_release = from_wheel(torch_wheel())
        for path in self.targets:
            assert (self.site / path).read_bytes() == read_release(path), f"scratch {path} is not pristine"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args, env=None, check=False, user=None, rc=None) -> subprocess.CompletedProcess:
        """``python -m torch_overlay ARGS`` with the scratch interpreter; ``check``: it must exit 0,
        ``rc``: it must exit with that status."""
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
        full_env.update(env or {})
        cmd = [str(self.python), "-m", "torch_overlay", *args]
        if user is not None:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True)
        expected = 0 if check else rc
        if expected is not None and proc.returncode != expected:
            raise AssertionError(f"{args} exited {proc.returncode}, not {expected}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def snapshot(self) -> dict[str, bytes]:
        """Bytes of every file an overlay command may touch: targets and the dist-info folder."""
        files = {p: (self.site / p).read_bytes() for p in [*self.targets, *self.created] if (self.site / p).exists()}
        for f in self.dist_info.rglob("*"):
            if f.is_file():
                files[f.relative_to(self.site).as_posix()] = f.read_bytes()
        return files
