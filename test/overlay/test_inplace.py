"""torch-overlay status / apply / revert on a real torch 2.5.1 installation."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from scratch_torch import REPO, ScratchTorch, torch_wheel
from torch_overlay.build import build_patched
from torch_overlay.pristine import from_wheel
from torch_overlay.record import Record, record_hash


@pytest.fixture
def scratch(tmp_path):
    return ScratchTorch(tmp_path)


@pytest.fixture(scope="module")
def expected_patched():
    from torch_overlay.series import load_series
    return build_patched(load_series("2.5.1"), from_wheel(torch_wheel()))


def assert_pristine(scratch, before):
    after = scratch.snapshot()
    assert after.keys() == before.keys(), sorted(after.keys() ^ before.keys())
    changed = [p for p in before if before[p] != after[p]]
    assert not changed, f"changed: {changed}"
    assert not (scratch.dist_info / "overlay-txn").exists()


def assert_fully_patched(scratch, expected_patched):
    for path, data in expected_patched.items():
        assert (scratch.site / path).read_bytes() == data, path
    entries = Record.parse((scratch.dist_info / "RECORD").read_text()).entries()
    for path in expected_patched:
        assert entries[path] == record_hash(expected_patched[path])
    for f in (scratch.dist_info / "overlay").rglob("*"):
        if f.is_file():
            rel = f.relative_to(scratch.site).as_posix()
            assert entries[rel] == record_hash(f.read_bytes()), rel
    assert not (scratch.dist_info / "overlay-txn").exists()


def test_status_of_a_pristine_release(scratch):
    out = scratch.run("status", check=True).stdout
    assert f"torch 2.5.1 at {scratch.site / 'torch'}" in out
    assert "series: patches/2.5.1" in out
    assert "applied: none" in out
    assert "files differing from RECORD: none" in out


def test_apply_patches_files_record_and_bytecode(scratch, expected_patched):
    proc = scratch.run("apply", check=True)
    assert "applied the torch 2.5.1 series" in proc.stdout
    assert_fully_patched(scratch, expected_patched)
    out = scratch.run("status", check=True).stdout
    assert "applied: 163673-annotate.patch" in out and "files differing from RECORD: none" in out
    # The bytecode was rebuilt for the new source (pyc header: magic, flags, mtime, size).
    src = scratch.site / "torch/fx/traceback.py"
    pyc = next((src.parent / "__pycache__").glob("traceback.cpython-*.pyc"))
    _, _, mtime, size = struct.unpack("<4sIII", pyc.read_bytes()[:16])
    assert (mtime, size) == (int(src.stat().st_mtime) & 0xFFFFFFFF, src.stat().st_size & 0xFFFFFFFF)
    # The scratch interpreter imports the patched module.
    probe = subprocess.run([str(scratch.python), "-c",
                            "import torch.fx.traceback as t; print(t.__file__); print(callable(t.annotate))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.split() == [str(src), "True"]


def test_second_apply_is_a_noop_that_says_so(scratch):
    scratch.run("apply", check=True)
    before = scratch.snapshot()
    proc = scratch.run("apply", check=True)
    assert "already applied" in proc.stdout and "nothing to do" in proc.stdout
    assert_pristine(scratch, before)  # i.e. unchanged


def test_revert_restores_every_byte(scratch):
    before = scratch.snapshot()
    scratch.run("apply", check=True)
    assert scratch.snapshot() != before
    proc = scratch.run("revert", check=True)
    assert f"reverted {len(scratch.targets)} files" in proc.stdout
    assert f"removed {len(scratch.series.created)} the series had created" in proc.stdout
    assert_pristine(scratch, before)
    wheel_record = from_wheel(torch_wheel())
    for path in scratch.targets:
        assert (scratch.site / path).read_bytes() == wheel_record(path)
    assert "nothing to revert" in scratch.run("revert", check=True).stdout


# kill -9 at every step of apply and revert: test_faults.py.


def test_a_file_the_series_creates_is_added_then_removed(scratch):
    """A patch may create a file (164776-regional-inductor: torch/fx/passes/regional_inductor.py, which the
    release lacks): apply writes it with a RECORD row of its hash, status checks it, revert deletes it and its
    bytecode, leaving RECORD as the wheel has it. A file already at that path is someone else's: apply refuses
    (revert would delete it), changing nothing."""
    created = sorted(scratch.series.created)
    assert created, "the series creates no file"
    before = scratch.snapshot()
    record_before = (scratch.dist_info / "RECORD").read_bytes()
    scratch.run("apply", check=True)
    entries = Record.parse((scratch.dist_info / "RECORD").read_text()).entries()
    for path in created:
        assert entries[path] == record_hash((scratch.site / path).read_bytes()), path
    probe = subprocess.run([str(scratch.python), "-c", "import torch.fx.passes.regional_inductor as m; "
                            "print(m.__file__, callable(m.regional_inductor))"], capture_output=True, text=True)
    assert probe.stdout.split() == [str(scratch.site / "torch/fx/passes/regional_inductor.py"), "True"], probe.stderr
    assert "files differing from RECORD: none" in scratch.run("status", check=True).stdout

    gone = scratch.site / created[0]
    data = gone.read_bytes()
    gone.unlink()
    assert f"files differing from RECORD: {created[0]}" in scratch.run("status", rc=1).stdout
    gone.write_bytes(data)

    scratch.run("revert", check=True)
    for path in created:
        src = scratch.site / path
        assert not src.exists(), path
        assert not list((src.parent / "__pycache__").glob(src.stem + ".*.pyc")), path
    assert (scratch.dist_info / "RECORD").read_bytes() == record_before
    assert_pristine(scratch, before)

    gone.write_text("# the user's own module\n")
    assert f"problem: {created[0]} is in the way" in scratch.run("status", rc=1).stdout
    proc = scratch.run("apply", rc=2)
    assert f"creates {created[0]}, but there is a file there already" in proc.stderr, proc.stderr
    assert "nothing was changed" in proc.stderr and "out of the way" in proc.stderr
    assert gone.read_text() == "# the user's own module\n"
    gone.unlink()  # the user's file aside, the scratch is as the release has it
    assert_pristine(scratch, before)


def test_two_commands_at_once_are_refused(scratch):
    before = scratch.snapshot()
    first = subprocess.Popen([str(scratch.python), "-m", "torch_overlay", "apply"],
                             env={**os.environ, "TORCH_OVERLAY_FAILPOINT": "staged:sleep"},
                             stderr=subprocess.PIPE, text=True)
    try:
        assert "failpoint staged reached" in first.stderr.readline()
        second = scratch.run("apply")
        assert second.returncode == 2
        assert "another torch-overlay command is working on" in second.stderr
        assert "changed nothing" in second.stderr
    finally:
        first.kill()
        first.wait()
    scratch.run("status", check=True)  # rolls the killed one back
    assert_pristine(scratch, before)


def test_locally_modified_file_is_refused_then_forced(scratch):
    # an edit no patch's context reaches (the end of a file the series changes in the middle)
    target = scratch.site / "torch/_functorch/partitioners.py"
    target.write_bytes(target.read_bytes() + b"# local edit\n")
    before = scratch.snapshot()
    proc = scratch.run("apply")
    assert proc.returncode == 2
    assert "differ from the wheel's RECORD" in proc.stderr and "torch/_functorch/partitioners.py" in proc.stderr
    assert "--force" in proc.stderr
    assert_pristine(scratch, before)
    assert "files differing from RECORD: torch/_functorch/partitioners.py" in scratch.run("status", rc=1).stdout

    scratch.run("apply", "--force", check=True)
    assert b'node.meta["autograd_backward"] = True' in target.read_bytes() and target.read_bytes().endswith(b"# local edit\n")
    scratch.run("revert", check=True)
    assert_pristine(scratch, before)


def test_patch_that_does_not_apply_changes_nothing(scratch, tmp_path):
    patches = tmp_path / "patches"
    shutil.copytree(REPO / "patches", patches)
    patch = patches / "2.5.1" / "163673-annotate.patch"
    # Corrupt a context line so the hunk no longer matches the release's file.
    text = patch.read_text().replace("\n from contextlib import contextmanager\n", "\n from contextlib import nothing\n", 1)
    patch.write_text(text)
    before = scratch.snapshot()
    proc = scratch.run("apply", env={"TORCH_OVERLAY_PATCHES": str(patches)})
    assert proc.returncode == 2
    assert "patch 163673-annotate.patch of the torch 2.5.1 series does not apply" in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert_pristine(scratch, before)


def test_unwritable_site_packages_changes_nothing():
    root = Path(tempfile.mkdtemp(prefix="overlay-ro-"))
    try:
        root.chmod(0o755)
        scratch = ScratchTorch(root)
        before = scratch.snapshot()
        if os.geteuid() == 0:  # root writes anywhere: run as nobody instead
            proc = scratch.run("apply", user=65534)
        else:
            for d in (scratch.dist_info, scratch.site / "torch"):
                d.chmod(0o555)
            proc = scratch.run("apply")
            for d in (scratch.dist_info, scratch.site / "torch"):
                d.chmod(0o755)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: ") and "Permission denied" in proc.stderr, proc.stderr
        assert "nothing was changed" in proc.stderr and "Traceback" not in proc.stderr
        assert_pristine(scratch, before)
    finally:
        shutil.rmtree(root)


def test_unsupported_torch_release_is_refused(tmp_path):
    oracle = Path(os.environ.get("TORCH_OVERLAY_ORACLE_PYTHON", REPO / ".venv-oracle" / "bin" / "python"))
    if not oracle.exists():
        pytest.skip(f"no torch 2.13 environment at {oracle}")
    # Only 2.5.1's series: torch 2.13 (the oracle, which must never be patched) has none there.
    patches = tmp_path / "patches"
    shutil.copytree(REPO / "patches" / "2.5.1", patches / "2.5.1")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_OVERLAY_PATCHES": str(patches)}
    proc = subprocess.run([str(oracle), "-m", "torch_overlay", "apply"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "no patch series for torch 2.13.0 (supported: 2.5.1" in proc.stderr
    status = subprocess.run([str(oracle), "-m", "torch_overlay", "status"], env=env, capture_output=True, text=True)
    assert "series: none for this release" in status.stdout


def test_pip_uninstall_after_apply_leaves_nothing(scratch):
    scratch.run("apply", check=True)
    proc = subprocess.run([str(scratch.python), "-m", "pip", "uninstall", "-y", "torch"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not (scratch.site / "torch").exists()
    assert not scratch.dist_info.exists(), list(scratch.dist_info.rglob("*"))


def test_apply_replaces_an_older_series(scratch, tmp_path, expected_patched):
    scratch.run("apply", check=True)
    newer = tmp_path / "patches"
    shutil.copytree(REPO / "patches", newer)
    patch = newer / "2.5.1" / "163673-annotate.patch"
    patch.write_text(patch.read_text().replace("Description: Backport", "Description: Backport (reworded)", 1))
    env = {"TORCH_OVERLAY_PATCHES": str(newer)}
    assert "an older series" in scratch.run("status", env=env, rc=1).stdout
    out = scratch.run("apply", env=env, check=True).stdout
    assert f"reverted {len(scratch.targets)} files" in out
    assert "applied the torch 2.5.1 series" in out
    state = json.loads((scratch.dist_info / "overlay" / "applied.json").read_text())
    from torch_overlay.series import load_series
    assert state["series_digest"] == load_series("2.5.1", newer).digest
    assert_fully_patched(scratch, expected_patched)


def _broken_newer_series(tmp_path, how):
    """A copy of the patches in which one 2.5.1 patch is changed as ``how`` says: "syntax" makes a line it
    adds invalid Python, "context" makes a hunk no longer match the release's file."""
    newer = tmp_path / "patches"
    shutil.copytree(REPO / "patches", newer)
    patch = newer / "2.5.1" / "163673-annotate.patch"
    text = patch.read_text()
    if how == "syntax":
        lines = text.splitlines(keepends=True)
        first_added_def = next(i for i, line in enumerate(lines) if line.startswith("+def "))
        lines[first_added_def] = lines[first_added_def].replace("+def ", "+def (", 1)
        text = "".join(lines)
    else:
        text = text.replace("\n from contextlib import contextmanager\n", "\n from contextlib import nothing\n", 1)
    patch.write_text(text)
    return newer


@pytest.mark.parametrize("how", ["syntax", "context"])
def test_a_broken_newer_series_leaves_the_applied_one_in_place(scratch, tmp_path, how):
    """apply over an older series checks the new series on the release's files before it reverts anything: a
    patch that no longer applies, or makes a file that does not compile, changes nothing."""
    scratch.run("apply", check=True)
    before = scratch.snapshot()
    newer = _broken_newer_series(tmp_path, how)
    proc = scratch.run("apply", env={"TORCH_OVERLAY_PATCHES": str(newer)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("does not compile" if how == "syntax" else "does not apply") in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert "reverted" not in proc.stderr + proc.stdout
    assert_pristine(scratch, before)  # the series applied before is still in place, byte for byte


def test_a_release_that_needs_nothing_says_so(scratch, tmp_path):
    """A release whose series is empty (every behaviour native): apply changes nothing, exits 0 and says
    why; an overlay applied from an older series is taken off."""
    scratch.run("apply", check=True)
    empty = tmp_path / "patches"
    shutil.copytree(REPO / "patches", empty)
    (empty / "2.5.1" / "series").write_text("# every behaviour is native to this release\n")
    env = {"TORCH_OVERLAY_PATCHES": str(empty)}
    out = scratch.run("apply", env=env, check=True).stdout
    assert out.splitlines()[0].startswith("reverted "), out
    assert "torch 2.5.1 needs nothing: every behaviour of the overlay is native to this release" in out
    before = scratch.snapshot()
    assert "needs nothing" in scratch.run("apply", env=env, check=True).stdout
    assert_pristine(scratch, before)
    status = scratch.run("status", env=env, check=True).stdout
    assert "added by the series: nothing (this release needs none)" in status
    assert "applied: none" in status
