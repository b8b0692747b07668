"""Build the patched overlay modules: pristine files + a series -> patched files.

Patches are applied with ``git apply`` in a scratch folder laid out like the
PyTorch source tree, so the same format-patch files serve an installed torch,
a wheel and a source checkout alike. The files a patch adds to upstream's test
tree are left out here: an installed torch or a wheel has no test tree.
"""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from .errors import OverlayError
from .series import TEST_TREE, Series


def build_patched(series: Series, read_pristine: Callable[[str], bytes]) -> dict[str, bytes]:
    """Return {repository path: patched bytes} for every path the series touches outside the test tree.

    ``read_pristine(path)`` gives the release's bytes for a path; it is not
    asked for files the series creates."""
    try:
        with tempfile.TemporaryDirectory(prefix="torch-overlay-build-") as tmp:
            return _build_in(Path(tmp), series, read_pristine)
    except (OSError, subprocess.CalledProcessError) as e:
        why = e.strerror if isinstance(e, OSError) else f"'{' '.join(e.cmd[:3])}' failed ({e.returncode})"
        raise OverlayError(f"could not build the patched files in a scratch folder ({tempfile.gettempdir()}): "
                           f"{why or e}", unchanged="nothing was changed",
                           todo="free some disk space (or set TMPDIR to a folder with room), then run the "
                                "command again") from None


def _build_in(tree: Path, series: Series, read_pristine: Callable[[str], bytes]) -> dict[str, bytes]:
    # Its own repository, so git never resolves paths against an enclosing one.
    subprocess.run(["git", "init", "-q", str(tree)], check=True, capture_output=True)
    for path in series.installed:
        if path not in series.created:
            dest = tree / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(read_pristine(path))
    for patch in series.patches:
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", f"--exclude={TEST_TREE}*", str(patch.path)],
                              cwd=tree, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OverlayError(
                f"patch {patch.name} of the torch {series.version} series does not apply:\n"
                + proc.stderr.strip(),
                unchanged="nothing was changed",
                todo="check that the target files are those of the release, or port the patch "
                     "(see CONTRIBUTING.md, 'Porting a patch')")
    return {path: (tree / path).read_bytes() for path in series.installed}
