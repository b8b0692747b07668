"""torch-overlay workspace / refresh with the real torch 2.5.1 files and the repository's real patches.

Every test refreshes into a temporary copy of patches/ (TORCH_OVERLAY_PATCHES), never the repository's."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from source_fixtures import git, overlay_env, patches_copy, wheel_reader
from scratch_torch import REPO, torch_wheel
from torch_overlay.build import build_patched
from torch_overlay.errors import OverlayError
from torch_overlay.series import load_series
from torch_overlay.workspace import CONFIG_PATCHES, CONFIG_VERSION, create_workspace, refresh

DEP3 = ("Description: a test patch\n that spans two lines\nOrigin: local\nForwarded: no\n"
        "Applied-Upstream: no\n")


@pytest.fixture
def patches_root(tmp_path, monkeypatch):
    root = patches_copy(tmp_path / "patches")
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(root))
    return root


def folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def blob(ws, rev, path) -> bytes:
    return subprocess.run(["git", "-C", str(ws), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout


def commit_edit(ws, path, line, message):
    with open(ws / path, "a") as f:
        f.write(line)
    git(ws, "commit", "-q", "-am", message)


def test_workspace_then_refresh_reproduces_the_real_patches_byte_for_byte(tmp_path, patches_root):
    original = folder_bytes(REPO / "patches" / "2.5.1")
    series = load_series("2.5.1", patches_root)
    ws = tmp_path / "ws"
    out = create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    assert f"{len(series.patches)} patch commit(s)" in out
    log = git(ws, "log", "--reverse", "--format=%s").splitlines()
    assert log == ["pristine torch 2.5.1", *(p.subject for p in series.patches)]
    assert git(ws, "config", CONFIG_VERSION).strip() == "2.5.1"
    assert git(ws, "config", CONFIG_PATCHES).strip() == str(patches_root.resolve() / "2.5.1")
    targets = [p for p in series.touched if p not in series.created]
    assert sorted(git(ws, "ls-tree", "-r", "--name-only", "pristine").split()) == sorted(targets)
    assert all(blob(ws, "pristine", path) == wheel_reader()(path) for path in targets)

    # Regenerate everything: every patch file and the series list from the commits alone.
    for name in original:
        if name != "series":
            (patches_root / "2.5.1" / name).unlink()
    comments = [l for l in original["series"].decode().splitlines(keepends=True) if l.startswith("#")]
    (patches_root / "2.5.1" / "series").write_text("".join(comments))
    out = refresh(ws)
    assert "written:" in out
    assert folder_bytes(patches_root / "2.5.1") == original
    assert "already up to date" in refresh(ws)
    assert folder_bytes(patches_root / "2.5.1") == original


def test_pristine_files_come_from_the_installed_torch(tmp_path, patches_root):
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=None, extra=[])
    series = load_series("2.5.1", patches_root)
    for path in [p for p in series.touched if p not in series.created]:  # a file the series creates is not in the release
        assert blob(ws, "pristine", path) == wheel_reader()(path), path


def test_a_new_commit_becomes_a_new_patch_and_dropping_it_removes_it(tmp_path, patches_root):
    folder = patches_root / "2.5.1"
    series_file = folder / "series"
    series_file.write_text("# first comment\n#   second comment\n\n" + series_file.read_text())
    original = folder_bytes(folder)
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=["torch/fx/node.py"])
    assert blob(ws, "pristine", "torch/fx/node.py") == wheel_reader()("torch/fx/node.py")
    commit_edit(ws, "torch/fx/node.py", "\n# torch-overlay: a new patch\n",
                "fx.node: mark the module\n\n" + DEP3 + "Patch-Name: local-mark-graph")

    out = refresh(ws)
    assert "written: local-mark-graph.patch, series" in out
    names = [l for l in series_file.read_text().splitlines() if l and not l.startswith("#")]
    assert names == [l for l in original["series"].decode().splitlines() if l and not l.startswith("#")] \
        + ["local-mark-graph.patch"]
    assert series_file.read_text().startswith("# first comment\n#   second comment\n\n")
    assert all(folder_bytes(folder)[n] == data for n, data in original.items() if n != "series")
    series = load_series("2.5.1", patches_root)
    assert series.patches[-1].fields["Patch-Name"] == "local-mark-graph"
    patched = build_patched(series, wheel_reader())
    assert patched["torch/fx/node.py"] == wheel_reader()("torch/fx/node.py") + b"\n# torch-overlay: a new patch\n"

    git(ws, "reset", "-q", "--hard", "HEAD~1")
    out = refresh(ws)
    assert "removed: local-mark-graph.patch" in out
    assert folder_bytes(folder) == original


def test_add_refuses_paths_outside_the_release(tmp_path, patches_root):
    for bad, match in [("../etc/passwd", "give a path inside the torch wheel"),
                       ("/torch/fx/graph.py", "give a path inside the torch wheel"),
                       ("torch/fx/no_such_module.py", "has no torch/fx/no_such_module.py")]:
        with pytest.raises(OverlayError, match=match):
            create_workspace("2.5.1", tmp_path / "ws", wheel=torch_wheel(), extra=[bad])
        assert not (tmp_path / "ws").exists()
    with pytest.raises(OverlayError, match="torch 2.5.1 has no file torch/fx/no_such_module.py"):
        create_workspace("2.5.1", tmp_path / "ws", wheel=None, extra=["torch/fx/no_such_module.py"])
    assert not (tmp_path / "ws").exists()


def test_workspace_refuses_a_non_empty_folder_and_an_unknown_version(tmp_path, patches_root):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("mine\n")
    with pytest.raises(OverlayError, match="exists and is not an empty folder"):
        create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    assert [p.name for p in ws.iterdir()] == ["keep.txt"]
    with pytest.raises(OverlayError, match=r"no patch series for torch 9\.9\.9 \(supported: 2\.5\.1, .*\)"):
        create_workspace("9.9.9", tmp_path / "ws99", wheel=None, extra=[])
    assert not (tmp_path / "ws99").exists()
    with pytest.raises(OverlayError, match="is not a torch 2.5.1 wheel"):
        create_workspace("2.5.1", tmp_path / "ws2", wheel=tmp_path / "ws" / "keep.txt", extra=[])
    with pytest.raises(OverlayError, match=f"cannot write the workspace {tmp_path / 'ws' / 'keep.txt' / 'w'}: "
                                           f"{tmp_path / 'ws' / 'keep.txt'} is not a folder"):
        create_workspace("2.5.1", tmp_path / "ws" / "keep.txt" / "w", wheel=torch_wheel(), extra=[])
    assert [p.name for p in ws.iterdir()] == ["keep.txt"] and (ws / "keep.txt").read_text() == "mine\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    create_workspace("2.5.1", empty, wheel=torch_wheel(), extra=[])
    assert git(empty, "tag").split() == ["pristine"]


@pytest.mark.parametrize("message, match", [
    ("fx.graph: no name\n\n" + DEP3, "has no usable 'Patch-Name:' field"),
    ("fx.graph: no origin\n\n" + DEP3.replace("Origin: local\n", "") + "Patch-Name: local-x",
     "lacks the DEP-3 header field"),
])
def test_refresh_refuses_a_commit_without_its_fields(tmp_path, patches_root, message, match):
    before = folder_bytes(patches_root / "2.5.1")
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    commit_edit(ws, "torch/fx/traceback.py", "# more\n", message)
    short = git(ws, "rev-parse", "--short", "HEAD").strip()
    with pytest.raises(OverlayError, match=match) as info:
        refresh(ws)
    assert f"commit {short} \"fx.graph:" in info.value.what
    assert "was not changed" in info.value.unchanged
    assert folder_bytes(patches_root / "2.5.1") == before


def test_refresh_refuses_uncommitted_changes_and_a_folder_that_is_no_workspace(tmp_path, patches_root):
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    (ws / "torch/fx/traceback.py").write_text("edited\n")
    with pytest.raises(OverlayError, match=r"uncommitted changes:\n M torch/fx/traceback.py"):
        refresh(ws)
    (tmp_path / "other").mkdir()
    git(tmp_path / "other", "init", "-q")
    with pytest.raises(OverlayError, match="not a torch-overlay workspace"):
        refresh(tmp_path / "other")


def test_a_patch_that_does_not_apply_stops_git_am_for_resolving(tmp_path, patches_root):
    """The porting flow: git am stops at the patch; refresh waits until it is resolved."""
    series = load_series("2.5.1", patches_root)
    broken = series.patches[1].path
    broken.write_text(broken.read_text().replace("\n@@ ", "\n@@ -1,1 +1,1 @@\n-no such line\n+x\n@@ ", 1))
    before = folder_bytes(patches_root / "2.5.1")
    ws = tmp_path / "ws"
    with pytest.raises(OverlayError, match=f"patch {broken.name} does not apply") as info:
        create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    assert "git am --continue" in info.value.todo
    assert (ws / ".git" / "rebase-apply").is_dir()
    assert git(ws, "log", "--format=%s").splitlines() == [series.patches[0].subject, "pristine torch 2.5.1"]
    with pytest.raises(OverlayError, match="git am or rebase is in progress"):
        refresh(ws)
    assert folder_bytes(patches_root / "2.5.1") == before


def test_refresh_killed_before_its_commit_point_leaves_the_patches_as_they_were(tmp_path, patches_root):
    folder = patches_root / "2.5.1"
    original = folder_bytes(folder)
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel(), extra=[])
    commit_edit(ws, "torch/fx/traceback.py", "# more\n", "fx: more\n\n" + DEP3 + "Patch-Name: local-more")
    env = overlay_env(patches_root)
    for failpoint, expected in [("staged", "rolled back"), ("journal", "finished")]:
        proc = subprocess.run([sys.executable, "-m", "torch_overlay", "refresh", str(ws)], capture_output=True,
                              text=True, env={**env, "TORCH_OVERLAY_FAILPOINT": failpoint})
        assert proc.returncode == -signal.SIGKILL
        if failpoint == "staged":
            assert folder_bytes(folder) == original
        assert (folder / "overlay-txn").is_dir()
        proc = subprocess.run([sys.executable, "-m", "torch_overlay", "refresh", str(ws)], capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert expected in proc.stdout
        assert "local-more.patch" in (folder / "series").read_text()
        git(ws, "reset", "-q", "--hard", "HEAD~1")
        assert refresh(ws) and folder_bytes(folder) == original
        git(ws, "cherry-pick", "HEAD@{1}")


def test_repositories_torch_overlay_makes_start_no_background_gc(tmp_path):
    """A commit of more loose objects than gc.auto's threshold (6700) starts no detached gc in a
    repository the tool runs git in isolated (a workspace): such a gc kept writing into a folder that
    was being renamed and removed (CI: 'Directory not empty' on the Debian tree's repository)."""
    import time

    from torch_overlay.source_tree import git as overlay_git

    repo = tmp_path / "many-objects"
    overlay_git(tmp_path, "init", "-q", str(repo), isolated=True)
    for i in range(7000):
        (repo / f"f{i}").write_text(f"{i}\n")
    overlay_git(repo, "add", "-A", isolated=True)
    overlay_git(repo, "commit", "-q", "-m", "many loose objects", isolated=True)
    time.sleep(3)  # a detached gc packs these within a second or two here
    assert list((repo / ".git" / "objects" / "pack").iterdir()) == []
    assert overlay_git(repo, "config", "gc.auto", isolated=True).stdout.strip() == "0"
