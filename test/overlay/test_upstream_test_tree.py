"""Patches that carry their test in upstream's test tree (test/...), as the upstream pull request would.

An installed torch and a wheel hold torch/ alone, so apply and the patched-file build leave a patch's test
files out; a workspace, refresh and apply-source (a PyTorch checkout has the test tree) keep them."""
from __future__ import annotations

import subprocess

import pytest

from source_fixtures import git, make_checkout, overlay_env, patches_copy, wheel_reader
from scratch_torch import ScratchTorch, torch_wheel
from torch_overlay.build import build_patched
from torch_overlay.errors import OverlayError
from torch_overlay.series import load_series
from torch_overlay.source_tree import apply_source
from torch_overlay.workspace import create_workspace, refresh

NEW_TEST = "test/fx/test_fx_overlay_marker.py"
TEST_TEXT = b"from torch.testing._internal.common_utils import run_tests\n\nif __name__ == '__main__':\n    run_tests()\n"
TARGET = "torch/fx/node.py"
MARKER = b"\n# torch-overlay: a patch with a test\n"
MESSAGE = ("fx.node: mark the module, with a test\n\nDescription: a test patch that adds an upstream test file\n"
           "Origin: local\nForwarded: no\nApplied-Upstream: no\nPatch-Name: local-mark-node\n")


@pytest.fixture(scope="module")
def patches_root(tmp_path_factory):
    """One copy of patches/ for the module (making the series with a test takes a workspace, the slow part)."""
    root = patches_copy(tmp_path_factory.mktemp("upstream-test-tree") / "patches")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCH_OVERLAY_PATCHES", str(root))
        yield root


def blob(repo, rev, path) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def series_with_a_test(tmp_path_factory, patches_root):
    """The 2.5.1 series plus local-mark-node, which changes TARGET and adds NEW_TEST (written by refresh)."""
    ws = tmp_path_factory.mktemp("ws") / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[TARGET])
    with open(ws / TARGET, "ab") as f:
        f.write(MARKER)
    (ws / NEW_TEST).parent.mkdir(parents=True)
    (ws / NEW_TEST).write_bytes(TEST_TEXT)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", MESSAGE)
    assert "written: local-mark-node.patch, series" in refresh(ws)
    series = load_series("2.5.1", patches_root)
    assert series.patches[-1].created == [NEW_TEST]
    return series


def test_workspace_and_refresh_keep_a_patch_s_test_file(tmp_path, series_with_a_test):
    ws = tmp_path / "ws-again"
    create_workspace("2.5.1", ws, wheel=torch_wheel())
    assert blob(ws, "HEAD", NEW_TEST) == TEST_TEXT
    assert "test/" not in git(ws, "ls-tree", "-r", "--name-only", "pristine")
    out = refresh(ws)
    assert "already up to date" in out, out


def test_the_installed_files_leave_the_test_tree_out(series_with_a_test):
    assert series_with_a_test.tests == [NEW_TEST]
    assert NEW_TEST not in series_with_a_test.installed
    patched = build_patched(series_with_a_test, wheel_reader())
    assert sorted(patched) == sorted(series_with_a_test.installed)
    assert patched[TARGET] == wheel_reader()(TARGET) + MARKER


def test_apply_status_revert_on_an_installed_torch(tmp_path, patches_root, series_with_a_test):
    scratch = ScratchTorch(tmp_path / "scratch")
    env = overlay_env(patches_root)
    before = scratch.snapshot()
    scratch.run("apply", env=env, check=True)
    assert (scratch.site / TARGET).read_bytes().endswith(MARKER)
    assert not (scratch.site / "test").exists()
    record = next(scratch.site.glob("torch-*.dist-info")) / "RECORD"
    assert "test/fx" not in record.read_text()
    scratch.run("status", env=env, check=True)
    scratch.run("revert", env=env, check=True)
    assert scratch.snapshot() == before


def test_apply_source_puts_the_test_file_in_the_checkout(tmp_path, patches_root, series_with_a_test):
    checkout = make_checkout(tmp_path / "pytorch", patches_root)
    apply_source(checkout)
    assert (checkout / NEW_TEST).read_bytes() == TEST_TEXT
    assert git(checkout, "status", "--porcelain=v1") == ""


def test_workspace_refuses_a_patch_that_changes_an_existing_upstream_test(tmp_path, monkeypatch):
    patches_root = patches_copy(tmp_path / "patches")
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(patches_root))
    # A patch made on a PyTorch checkout, changing a test file the release has (no wheel holds it).
    repo = tmp_path / "pytorch"
    (repo / "test" / "fx").mkdir(parents=True)
    (repo / "test" / "fx" / "test_fx_traceback.py").write_text("# upstream's test\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release")
    (repo / "test" / "fx" / "test_fx_traceback.py").write_text("# upstream's test\n# and ours\n")
    git(repo, "commit", "-q", "-am", MESSAGE)
    patch = git(repo, "format-patch", "-1", "--stdout")
    (patches_root / "2.5.1" / "local-mark-node.patch").write_text(patch)
    with open(patches_root / "2.5.1" / "series", "a") as f:
        f.write("local-mark-node.patch\n")
    with pytest.raises(OverlayError, match="changes test/fx/test_fx_traceback.py, a file of upstream's test tree"):
        create_workspace("2.5.1", tmp_path / "ws", wheel=torch_wheel())
    assert not (tmp_path / "ws").exists()
