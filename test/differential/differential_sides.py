"""The two sides of the no-annotation differential: the patched torch in .venv and a pristine copy of it.

The pristine side is a scratch installation (test/overlay/scratch_torch.py: hard links to .venv's torch,
private copies of every file the series touches) on which ``torch-overlay revert`` has restored the
release's files, checked against the wheel's RECORD. Each side runs the corpus in its own interpreter
(differential_observe.py), so the two torches never share a process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "test" / "overlay"))

from scratch_torch import TORCH_RELEASE, ScratchTorch  # noqa: E402

PATCHED_PYTHON = REPO / ".venv" / "bin" / "python"


def patched_files(release: str = TORCH_RELEASE) -> list[str]:
    """Paths inside site-packages that the release's series touches (their line numbers are not compared)."""
    from torch_overlay.series import load_series

    return list(load_series(release).installed)


def pristine_python(root: Path) -> Path:
    """An interpreter whose torch is the pristine release (a reverted scratch copy made under ``root``)."""
    return ScratchTorch(root).python


def observe(python: Path, programs: list[str], out: Path, timeout: float = 1800) -> dict:
    """Run ``programs`` under ``python``; the observations as a dict (differential_observe.py's JSON)."""
    listing = out.with_suffix(".patched-files.txt")
    listing.write_text("\n".join(patched_files()))
    # Each side starts with an empty Inductor cache of its own: the cache is shared per user by default, and
    # its keys hash torch's sources, so a side that ran before would find hits the other side cannot have.
    cache = out.with_suffix(".inductor-cache")
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache))
    proc = subprocess.run([str(python), str(HERE / "differential_observe.py"), str(out), str(listing), *programs],
                          capture_output=True, text=True, timeout=timeout, cwd=str(HERE), env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"the corpus run under {python} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())
