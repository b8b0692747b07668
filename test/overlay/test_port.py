"""Porting a series to another release: ``torch-overlay workspace NEW DIR --from OLD``, then refresh.

Two small releases made here (9.1.0 and 9.2.0, real wheel files with a RECORD) hold one file per
case a port meets: a patch that applies as it is, one whose context changed (three-way merge), one
whose file moved (patches/moved-files), one already in the new release, and one that conflicts.
test_port_real.py ports the repository's real 2.5.1 series to the real 2.6.0 and 2.9.1 wheels."""
from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from source_fixtures import git
from torch_overlay.build import build_patched
from torch_overlay.errors import OverlayError
from torch_overlay.port import APPLIED, CONFLICTS, DROPPED, MERGED, PENDING, follow_moves, port_report
from torch_overlay.pristine import from_wheel
from torch_overlay.record import record_line
from torch_overlay.series import load_series
from torch_overlay.workspace import create_workspace, refresh

OLD, NEW = "9.1.0", "9.2.0"


def lines(n, tag=""):
    return "".join(f"line {i}{tag}\n" for i in range(1, n + 1))


OLD_FILES = {
    "torch/same.py": lines(20),
    "torch/context.py": lines(20),
    "torch/old_name.py": lines(20),
    "torch/upstreamed.py": lines(20),
    "torch/conflict.py": lines(20),
}
NEW_FILES = {
    "torch/same.py": "# a new first line\n" + lines(20),                             # offsets only
    "torch/context.py": lines(20).replace("line 8\n", "line 8 changed\n"),            # the hunk's context
    "torch/new_name.py": lines(20),                                                     # moved, same content
    "torch/upstreamed.py": lines(20).replace("line 10\n", "line 10 fixed\n"),         # the patch's own change
    "torch/conflict.py": lines(20).replace("line 10\n", "line 10 upstream\n"),        # the patch's line, otherwise
}
# (Patch-Name, file, the change) in series order
PATCHES = [
    ("local-same", "torch/same.py", ("line 10\n", "line 10 fixed\n")),
    ("local-context", "torch/context.py", ("line 10\n", "line 10 fixed\n")),
    ("local-moved", "torch/old_name.py", ("line 10\n", "line 10 fixed\n")),
    ("local-upstreamed", "torch/upstreamed.py", ("line 10\n", "line 10 fixed\n")),
    ("local-conflict", "torch/conflict.py", ("line 10\n", "line 10 ours\n")),
    ("local-after", "torch/same.py", ("line 15\n", "line 15 fixed\n")),
]


def make_wheel(folder, version, files):
    wheel = folder / f"torch-{version}-cp311-cp311-linux_x86_64.whl"
    data = {path: text.encode() for path, text in files.items()}
    record = "".join(record_line(p, d) + "\n" for p, d in data.items()) + f"torch-{version}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, d in data.items():
            zf.writestr(path, d)
        zf.writestr(f"torch-{version}.dist-info/RECORD", record)
    return wheel


def make_series(root, repo):
    """patches/9.1.0 as format-patch files made with git from the old release's files."""
    repo.mkdir()
    git(repo, "init", "-q")
    for path, text in OLD_FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pristine")
    for name, path, (before, after) in PATCHES:
        (repo / path).write_text((repo / path).read_text().replace(before, after))
        git(repo, "commit", "-q", "-am", f"{name}: change {path}\n\nDescription: {name}\nOrigin: local\n"
                                         f"Forwarded: no\nApplied-Upstream: no\nPatch-Name: {name}")
    folder = root / OLD
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "-N", "-o", str(folder), "HEAD~6")
    for made, (name, _, _) in zip(sorted(folder.glob("*.patch")), PATCHES):
        made.rename(folder / f"{name}.patch")
    (folder / "series").write_text("".join(f"{name}.patch\n" for name, _, _ in PATCHES))
    (root / "moved-files").write_text(f"# test\n{NEW} torch/old_name.py torch/new_name.py\n")


@pytest.fixture
def release(tmp_path, monkeypatch):
    root = tmp_path / "patches"
    root.mkdir()
    make_series(root, tmp_path / "authoring")
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(root))
    old = make_wheel(tmp_path, OLD, OLD_FILES)
    new = make_wheel(tmp_path, NEW, NEW_FILES)
    return root, old, new


def states(ws):
    return [(o.name, o.state, o.files, o.stopped, o.moved) for o in port_report(ws, OLD, {"torch/old_name.py":
                                                                                        "torch/new_name.py"})]


def continue_rebase(ws):
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "rebase",
                    "--continue"], check=True, capture_output=True, env={**os.environ, "GIT_EDITOR": "true"})


def test_port_merges_follows_moves_and_stops_at_the_conflict(tmp_path, release):
    root, old, new = release
    ws = tmp_path / "ws"
    with pytest.raises(OverlayError, match="git rebase stopped at a conflict") as info:
        create_workspace(NEW, ws, wheel=new, from_version=OLD, from_wheel_path=old)
    assert "local-conflict: conflicts in torch/conflict.py: git rebase stopped here" in info.value.what
    assert "git rebase --continue" in info.value.todo
    moved = {"torch/old_name.py": "torch/new_name.py"}
    assert states(ws) == [
        ("local-same", APPLIED, [], False, {}),
        ("local-context", MERGED, ["torch/context.py"], False, {}),
        ("local-moved", APPLIED, [], False, moved),
        ("local-upstreamed", DROPPED, [], False, {}),
        ("local-conflict", CONFLICTS, ["torch/conflict.py"], True, {}),
        ("local-after", PENDING, [], False, {}),
    ]
    conflicted = (ws / "torch/conflict.py").read_text()
    assert "<<<<<<< HEAD\nline 10 upstream\n=======\nline 10 ours\n>>>>>>> " in conflicted
    assert (ws / "torch/new_name.py").read_text() == lines(20).replace("line 10\n", "line 10 fixed\n")
    assert not (ws / "torch/old_name.py").exists()
    with pytest.raises(OverlayError, match="rebase is in progress"):
        refresh(ws)

    # The usual git flow: resolve, add, continue; the rest of the series follows.
    (ws / "torch/conflict.py").write_text(lines(20).replace("line 10\n", "line 10 upstream and ours\n"))
    git(ws, "add", "torch/conflict.py")
    continue_rebase(ws)
    assert [s[:4] for s in states(ws)][4:] == [("local-conflict", CONFLICTS, ["torch/conflict.py"], False),
                                               ("local-after", APPLIED, [], False)]

    out = refresh(ws)
    assert "local-conflict: conflicts in torch/conflict.py, resolved by hand" in out
    folder = root / NEW
    # Stored once: what applies unchanged is named in the old release's folder, the rest is written here.
    assert (folder / "series").read_text().splitlines()[1:] == [
        f"../{OLD}/local-same.patch", "local-context.patch", "local-moved.patch", "local-conflict.patch",
        f"../{OLD}/local-after.patch"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "local-conflict.patch", "local-context.patch", "local-moved.patch", "series"]
    series = load_series(NEW, root)
    patched = build_patched(series, from_wheel(new))
    for path, data in patched.items():
        assert data == (ws / path).read_bytes(), path
    assert "already up to date" in refresh(ws)

    # Stored once across every release, not only the one ported from: when 9.2.0's series is made again
    # and a newer release (9.2.5) keeps the same patch, refresh names that copy instead of writing another.
    newer = root / "9.2.5"
    newer.mkdir()
    (folder / "local-context.patch").rename(newer / "local-context.patch")
    (newer / "series").write_text("local-context.patch\n")
    for f in folder.iterdir():
        f.unlink()
    refresh(ws)
    assert "../9.2.5/local-context.patch" in (folder / "series").read_text().splitlines()
    assert not (folder / "local-context.patch").exists()


def test_port_refuses_a_moved_file_the_table_does_not_know(tmp_path, release):
    root, old, new = release
    (root / "moved-files").write_text("")
    with pytest.raises(OverlayError, match="torch 9.2.0 has no torch/old_name.py, a file the torch 9.1.0 series "
                                           "patches") as info:
        create_workspace(NEW, tmp_path / "ws", wheel=new, from_version=OLD, from_wheel_path=old)
    assert "moved-files" in info.value.todo
    assert not (tmp_path / "ws").exists()


def test_port_back_to_an_older_release_undoes_the_moves(tmp_path, release):
    """A series made for the newer release (9.2.0: new_name.py) ported back to 9.1.0 (old_name.py)."""
    root, old, new = release
    (root / NEW).mkdir()
    kept = ["local-same", "local-moved"]
    for name in kept:
        data = follow_moves((root / OLD / f"{name}.patch").read_bytes(), {"torch/old_name.py": "torch/new_name.py"})
        (root / NEW / f"{name}.patch").write_bytes(data)
    (root / NEW / "series").write_text("".join(f"{name}.patch\n" for name in kept))
    ws = tmp_path / "ws"
    create_workspace(OLD, ws, wheel=old, from_version=NEW, from_wheel_path=new)
    assert (ws / "torch/old_name.py").read_text() == lines(20).replace("line 10\n", "line 10 fixed\n")
    assert not (ws / "torch/new_name.py").exists()
    assert (ws / "torch/same.py").read_text() == lines(20).replace("line 10\n", "line 10 fixed\n")


def test_a_first_series_starts_from_the_files_named_with_add(tmp_path, release):
    root, old, new = release
    ws = tmp_path / "ws"
    create_workspace("9.2.0", ws, wheel=new, extra=["torch/context.py"])
    assert (ws / "torch/context.py").read_bytes() == NEW_FILES["torch/context.py"].encode()
    (ws / "torch/context.py").write_text(NEW_FILES["torch/context.py"].replace("line 3\n", "line 3 fixed\n"))
    git(ws, "commit", "-q", "-am", "local-first: change torch/context.py\n\nDescription: first\nOrigin: local\n"
                                   "Forwarded: no\nApplied-Upstream: no\nPatch-Name: local-first")
    refresh(ws)
    assert [p.name for p in load_series("9.2.0", root).patches] == ["local-first.patch"]


def test_refresh_refuses_a_port_whose_rebase_was_aborted(tmp_path, release):
    root, old, new = release
    ws = tmp_path / "ws"
    with pytest.raises(OverlayError, match="stopped at a conflict"):
        create_workspace(NEW, ws, wheel=new, from_version=OLD, from_wheel_path=old)
    git(ws, "rebase", "--abort")
    with pytest.raises(OverlayError, match="is not built on the tag pristine"):
        refresh(ws)
    assert not (root / NEW).exists()
