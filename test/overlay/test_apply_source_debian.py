"""apply-source on a real PyTorch source tree: Debian's 2.6.0 source package, the whole upstream tree.

The other apply-source tests use checkouts holding only the wheel's copies of the files the series touches
(source_fixtures.make_checkout); this one puts the 2.6.0 series on the real v2.6.0 tree (scripts/
debian_source.py fetches it once into build/debian-pytorch/), as a contributor's clone at that tag. Debian
packages only 2.6.0 with the full tree, so this runs where .venv holds 2.6.0 (conftest.RELEASE_ONLY; CI's
2.6.0 step), with the 2.6.0 wheel the other tool tests use (scratch_torch.torch_wheel).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from scratch_torch import REPO, ScratchTorch, torch_wheel
from source_fixtures import debian_checkout, debian_source, git, overlay_env, patches_copy
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_overlay.build import build_patched
from torch_overlay.pristine import from_wheel
from torch_overlay.series import load_series, parse_patch

RELEASE = debian_source.RELEASE


class TestApplySourceOnDebianTree(TestCase):
    def setUp(self):
        super().setUp()
        self.root = Path(tempfile.mkdtemp(prefix="debian-tree-test-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.patches = patches_copy(self.root / "patches")  # refresh writes here, never into the repository
        self.series = load_series(RELEASE, self.patches)
        self.checkout = debian_checkout(self.root / "pytorch")
        self.tag = git(self.checkout, "rev-parse", f"v{RELEASE}").strip()
        out = self.overlay("apply-source", str(self.checkout))
        self.assertIn(f"created branch overlay/{RELEASE}", out)

    def overlay(self, *args: str, python: Path = Path(sys.executable)) -> str:
        proc = subprocess.run([str(python), "-m", "torch_overlay", *args], env=overlay_env(self.patches),
                              capture_output=True, text=True, cwd=REPO)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout

    def test_every_patch_is_one_commit_with_its_dep3_header(self):
        commits = git(self.checkout, "rev-list", "--reverse", f"{self.tag}..HEAD").split()
        self.assertEqual(len(commits), len(self.series.patches))
        for commit, patch in zip(commits, self.series.patches):
            # The commit written out again as a patch carries the same subject and DEP-3 fields.
            again = self.root / "again.patch"
            again.write_text(git(self.checkout, "format-patch", "--stdout", "-1", commit))
            found = parse_patch(again)
            self.assertEqual((found.subject, found.fields), (patch.subject, patch.fields), patch.name)
        self.assertEqual(git(self.checkout, "status", "--porcelain=v1"), "")

    def test_the_files_equal_the_patched_wheel_build(self):
        built = build_patched(self.series, from_wheel(torch_wheel(RELEASE)))
        self.assertEqual(sorted(built), sorted(self.series.touched))
        for path, data in built.items():
            self.assertTrue((self.checkout / path).read_bytes() == data, path)
        # Only those files changed: the rest of the tree is the tag's.
        changed = git(self.checkout, "diff", "--name-only", self.tag, "HEAD").split()
        self.assertEqual(sorted(changed), sorted(self.series.touched))

    def test_refresh_gives_back_the_series_and_develop_runs_the_tree(self):
        out = self.overlay("refresh", str(self.checkout))
        self.assertIn(f"{len(self.series.patches)} patch(es)", out)
        self.assertIn("already up to date: nothing written", out)
        # develop: a scratch copy of .venv's torch 2.6.0 runs the tree's Python files.
        scratch = ScratchTorch(self.root / "scratch")
        pristine = scratch.snapshot()
        self.overlay("develop", str(self.checkout), python=scratch.python)
        with open(self.checkout / "torch/fx/traceback.py", "a") as f:
            f.write("\nDEVELOP_PROBE = 'debian'\n")
        probe = subprocess.run([str(scratch.python), "-c", "import torch.fx.traceback as t; print(t.DEVELOP_PROBE)"],
                               capture_output=True, text=True)
        self.assertEqual(probe.stdout.strip(), "debian", probe.stderr)
        self.overlay("revert", python=scratch.python)
        now = scratch.snapshot()
        self.assertEqual(sorted(p for p in now.keys() | pristine.keys() if now.get(p) != pristine.get(p)), [])


if __name__ == "__main__":
    run_tests()
