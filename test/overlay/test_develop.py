"""torch-overlay develop: a scratch copy of the real torch runs a checkout's Python files through links.

The checkout is the real release files at tag v<release> with the series put on by apply-source (git am);
the torch is a scratch copy of .venv's (scratch_torch.py), so the shared .venv is never touched.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fault_checks import load_torch_during
from scratch_torch import ScratchTorch, TORCH_RELEASE
from source_fixtures import git, make_checkout, overlay_env, patches_copy
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_overlay.series import load_series

PROBE = "\nDEVELOP_PROBE = 'edited in the checkout'\n"
READ_PROBE = ("import torch, torch.fx.traceback as t; "
              "print(getattr(t, 'DEVELOP_PROBE', None), hasattr(t, 'annotate'), t.__file__)")


class TestDevelop(TestCase):
    def setUp(self):
        super().setUp()
        self.root = Path(tempfile.mkdtemp(prefix="develop-test-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.patches = patches_copy(self.root / "patches")
        self.env = {"TORCH_OVERLAY_PATCHES": str(self.patches)}
        self._scratch = None

    @property
    def scratch(self) -> ScratchTorch:
        """The scratch torch, made on first use (a few seconds: the refresh test needs none)."""
        if self._scratch is None:
            self._scratch = ScratchTorch(self.root / "scratch")
            self.pristine = self._scratch.snapshot()
        return self._scratch

    def series_checkout(self, checkout: Path | None = None) -> Path:
        """A checkout at the release tag with the series put on by apply-source."""
        checkout = checkout or make_checkout(self.root / "pytorch", self.patches)
        subprocess.run([sys.executable, "-m", "torch_overlay", "apply-source", str(checkout)],
                       env=overlay_env(self.patches), check=True, capture_output=True)
        return checkout

    def develop(self, checkout: Path) -> subprocess.CompletedProcess:
        proc = self.scratch.run("develop", str(checkout), env=self.env)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, "develop", proc.stdout, proc.stderr)
        return proc

    def fresh_import(self) -> list[str]:
        proc = subprocess.run([str(self.scratch.python), "-c", READ_PROBE], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.split()

    def test_an_edit_in_the_checkout_is_what_import_torch_runs(self):
        checkout = self.series_checkout()
        out = self.develop(checkout).stdout
        series = load_series(TORCH_RELEASE, self.patches)
        touched = sorted(p for p in series.touched if p.startswith("torch/") and p.endswith(".py"))
        self.assertIn(f"now runs {len(touched)} Python file(s) of {checkout}", out)
        for path in touched:
            self.assertEqual((self.scratch.site / path).resolve(), checkout / path, path)
        self.assertEqual(self.fresh_import()[:3], ["None", "True", str(self.scratch.site / "torch/fx/traceback.py")])
        with open(checkout / "torch/fx/traceback.py", "a") as f:
            f.write(PROBE)
        self.assertEqual(self.fresh_import()[:4], ["edited", "in", "the", "checkout"])

    def test_status_reports_develop_mode_and_revert_restores_the_release_byte_for_byte(self):
        checkout = self.series_checkout()
        self.scratch.run("apply", check=True, env=self.env)  # develop starts from a patched torch too
        self.develop(checkout)
        with open(checkout / "torch/fx/traceback.py", "a") as f:
            f.write(PROBE)  # an edit is not a modified torch file: status stays 0
        status = self.scratch.run("status", "--json", env=self.env, rc=0).stdout
        found = json.loads(status)
        self.assertEqual(found["develop"]["checkout"], str(checkout))
        self.assertEqual(found["develop"]["branch"], f"overlay/{TORCH_RELEASE}")
        self.assertEqual(found["modified"], {})
        self.assertIn("applied: develop mode:", self.scratch.run("status", env=self.env, rc=0).stdout)
        # A link replaced behind the tool's back is a problem status names.
        link = self.scratch.site / "torch/fx/traceback.py"
        link.unlink()
        link.write_bytes((checkout / "torch/fx/traceback.py").read_bytes())
        broken = self.scratch.run("status", env=self.env, rc=1).stdout
        self.assertIn("problem: torch/fx/traceback.py is no longer the link to", broken)
        link.unlink()
        link.symlink_to(checkout / "torch/fx/traceback.py")
        self.scratch.run("revert", check=True, env=self.env)
        self.assert_same_files(self.scratch.snapshot(), self.pristine)
        self.assertFalse(any(p.is_symlink() for p in (self.scratch.site / "torch").rglob("*.py")))
        self.assertEqual(self.fresh_import()[:2], ["None", "False"])

    def test_refresh_writes_the_checkouts_commits_back_to_the_series(self):
        checkout = self.series_checkout()
        env = overlay_env(self.patches)
        refresh = [sys.executable, "-m", "torch_overlay", "refresh", str(checkout)]
        out = subprocess.run(refresh, env=env, capture_output=True, text=True, check=True).stdout
        self.assertIn("already up to date: nothing written", out)
        # Work on the last patch in the checkout: edit, amend its commit, refresh.
        last = load_series(TORCH_RELEASE, self.patches).patches[-1]
        target = checkout / last.touched[0]
        with open(target, "a") as f:
            f.write("\n# a developer's fix\n")
        git(checkout, "commit", "-q", "-a", "--amend", "--no-edit")
        out = subprocess.run(refresh, env=env, capture_output=True, text=True, check=True).stdout
        self.assertIn(f"  written: {last.name}\n", out)
        self.assertIn("+# a developer's fix", (self.patches / TORCH_RELEASE / last.name).read_text())

    def test_a_process_that_loads_torch_while_develop_prepares_makes_it_refuse(self):
        """As apply and revert (test_inplace_faults.py): a job that imports torch after develop's first look for
        processes and before its import barrier (develop stopped at its commit point) makes develop back out once
        the barrier is in place. Before that second look develop linked the checkout's files under the job,
        which then failed on 'import torch._dynamo' (AttributeError: ... 'annotate')."""
        checkout = self.series_checkout()
        before = self.scratch.snapshot()
        trial = load_torch_during(self.scratch, ["develop", str(checkout)], "journal", env=self.env)
        self.assertEqual(trial.command.returncode, 2, trial.command.stderr)
        for phrase in (f"PID {trial.job_pid}: ", "-c import sys, torch", "unchanged: nothing was changed"):
            self.assertIn(phrase, trial.command.stderr)
        self.assert_same_files(self.scratch.snapshot(), before)
        self.assertFalse((self.scratch.dist_info / "overlay-txn").exists())
        self.assertEqual(trial.job_saw, "pristine")

    def assert_same_files(self, now: dict[str, bytes], before: dict[str, bytes]) -> None:
        """Byte for byte, naming the paths that differ (a diff of megabytes of bytes would take minutes)."""
        self.assertEqual(sorted(p for p in now.keys() | before.keys() if now.get(p) != before.get(p)), [])

    def assert_refused(self, checkout: Path, message: str) -> str:
        before = self.scratch.snapshot()
        proc = self.scratch.run("develop", str(checkout), env=self.env, rc=2)
        self.assertIn(message, proc.stderr)
        self.assertIn("unchanged: nothing was changed", proc.stderr)
        self.assert_same_files(self.scratch.snapshot(), before)
        self.assertFalse(any(p.is_symlink() for p in (self.scratch.site / "torch").rglob("*.py")))
        return proc.stderr

    def test_refuses_a_checkout_without_the_series_commits_or_of_another_release(self):
        bare = make_checkout(self.root / "bare", self.patches)
        self.assert_refused(bare, f"has no series commits: HEAD is v{TORCH_RELEASE} itself")
        git(bare, "switch", "-q", "-c", "work")
        (bare / "torch/fx/traceback.py").write_text("# my own change\n")
        git(bare, "commit", "-q", "-am", "my own change")
        self.assert_refused(bare, "has no 'Patch-Name:' field: it is not a commit of the series")
        checkout = self.series_checkout()
        other = "2.99.0"  # what version.txt of a checkout of another release says
        git(checkout, "config", "torch-overlay.version", other)
        err = self.assert_refused(checkout, f"{checkout} is torch {other}, and this Python's torch is {TORCH_RELEASE}")
        self.assertIn("to do: run develop with the Python whose torch is 2.99.0", err)
        # The right version number on the files of another release: the release tag's files differ.
        checkout = make_checkout(self.root / "other", self.patches)
        with open(checkout / "torch/_functorch/partitioners.py", "a") as f:
            f.write("# not this release\n")
        git(checkout, "commit", "-q", "-a", "--amend", "--no-edit")
        git(checkout, "tag", "-f", f"v{TORCH_RELEASE}")
        self.series_checkout(checkout)
        self.assert_refused(checkout, f"are not those of the installed torch {TORCH_RELEASE}: "
                                      "torch/_functorch/partitioners.py differ")

    def commit_in_series(self, checkout: Path, path: str, text: str, name: str) -> Path:
        """A commit of the series (it has a Patch-Name) that writes PATH in the checkout."""
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
        git(checkout, "add", path)
        git(checkout, "commit", "-q", "-m", f"{name}\n\nPatch-Name: {name}")
        return checkout / path

    def test_links_a_json_data_file_the_series_changes_and_refuses_a_cpp_source(self):
        # From 2.10 a series adds graph break types to torch/_dynamo/graph_break_registry.json, which the
        # wheel installs as it stands in the tree: a link serves it as it serves a Python file.
        checkout = self.series_checkout()
        data = self.commit_in_series(checkout, "torch/_dynamo/develop_probe.json", '{"probe": 1}\n',
                                     "local-develop-probe")
        self.develop(checkout)
        self.assertEqual((self.scratch.site / "torch/_dynamo/develop_probe.json").resolve(), data)
        self.scratch.run("revert", env=self.env)
        # A C++ source reaches the wheel only through a build.
        other = self.series_checkout(make_checkout(self.root / "cpp", self.patches))
        self.commit_in_series(other, "torch/csrc/develop_probe.cpp", "// probe\n", "local-develop-cpp")
        self.assert_refused(other, "develop links Python files (and JSON data files) only, and the series "
                                   "commits in")


if __name__ == "__main__":
    run_tests()
