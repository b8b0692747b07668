"""Every release's patch files are exactly what ``torch-overlay refresh`` writes for them.

A hand edit of a patch (a changed hunk, a header line) leaves its index, hunk-offset and diffstat lines stale; git
still applies it, so nothing else notices, but the next contributor's refresh rewrites the file and their pull
request carries noise they did not make. This runs on whichever release .venv holds (CI's step of each release):
a workspace of that release's series, pristine files from the installed torch, refreshed into a copy of patches/,
must write nothing. (test_workspace.py regenerates 2.5.1's folder from scratch; test_apply_source_debian.py does
the same from Debian's 2.6.0 tree.)
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from unittest.mock import patch

from source_fixtures import patches_copy
from scratch_torch import TORCH_RELEASE
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_overlay.workspace import create_workspace, refresh


class TestSeriesIsRefreshOutput(TestCase):
    def test_refresh_of_the_installed_release_writes_nothing(self):
        with tempfile.TemporaryDirectory(prefix="refresh-stable-") as tmp:
            root = patches_copy(Path(tmp) / "patches")
            before = {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
            with patch.dict(os.environ, {"TORCH_OVERLAY_PATCHES": str(root)}):
                create_workspace(TORCH_RELEASE, Path(tmp) / "ws", wheel=None, extra=[])
                out = refresh(Path(tmp) / "ws")
            changed = [str(p.relative_to(root)) for p, data in before.items() if p.read_bytes() != data]
            self.assertIn("already up to date: nothing written", out)
            self.assertEqual(changed, [], f"refresh rewrote these patch files of torch {TORCH_RELEASE}: {changed}; "
                                          "run `torch-overlay workspace` + `refresh` and commit what it writes")


if __name__ == "__main__":
    run_tests()
