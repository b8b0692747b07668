"""The repository's real 2.5.1 series ported to the real 2.6.0 and 2.9.1 wheels, and stored once.

The wheels are downloaded once into build/wheels (about 0.8 GB each) and never installed.  The
series changes as the project goes on, so these tests check what must hold for any series: the
report covers every patch in order, a conflict leaves markers, 2.9.1 follows the moved module, and
refresh writes a series that rebuilds the ported files, storing once exactly the patches the report
calls applied as they are."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from scratch_torch import torch_wheel
from source_fixtures import git, make_checkout, patches_copy, wheel_reader
from torch_overlay.build import build_patched
from torch_overlay.errors import OverlayError
from torch_overlay.port import APPLIED, CONFLICTS, PENDING, moved_paths, port_report
from torch_overlay.pristine import from_wheel
from torch_overlay.series import load_series
from torch_overlay.source_tree import apply_source
from torch_overlay.workspace import create_workspace, refresh

MOVED = ("torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py",
         "torch/_functorch/_aot_autograd/graph_capture.py")


@pytest.fixture
def patches_root(tmp_path, monkeypatch):
    root = patches_copy(tmp_path / "patches")
    for folder in root.iterdir():  # a first port: the other releases' series are not there yet
        if folder.is_dir() and folder.name != "2.5.1":
            shutil.rmtree(folder)
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(root))
    return root


def port(ws, version, root):
    """Port 2.5.1's series to ``version``; resolve every conflict by taking the patch's side."""
    try:
        create_workspace(version, ws, wheel=torch_wheel(version), from_version="2.5.1",
                         from_wheel_path=torch_wheel("2.5.1"))
    except OverlayError as e:
        assert "git rebase stopped at a conflict" in e.what
    moves = moved_paths(root, "2.5.1", version)
    first_stop = port_report(ws, "2.5.1", moves)
    while (ws / ".git" / "rebase-merge").exists():
        unmerged = git(ws, "diff", "--name-only", "--diff-filter=U").split()
        assert unmerged and all("<<<<<<< " in (ws / f).read_text() for f in unmerged)
        git(ws, "checkout", "--theirs", "--", *unmerged)
        git(ws, "add", "--", *unmerged)
        subprocess.run(["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t.invalid", "rebase",
                        "--continue"], env={**os.environ, "GIT_EDITOR": "true"}, capture_output=True)
    return first_stop, port_report(ws, "2.5.1", moves)


def check_refresh(ws, root, version, report):
    out = refresh(ws)
    assert f"refreshed {root / version}" in out
    series = load_series(version, root)
    stored_once = {p.name for p in series.patches if p.path.parent.name == "2.5.1"}
    assert stored_once == {f"{o.name}.patch" for o in report if o.state == APPLIED}
    assert sorted(p.name for p in (root / version).glob("*.patch")) == sorted(
        p.name for p in series.patches if p.name not in stored_once)
    for path, data in build_patched(series, from_wheel(torch_wheel(version))).items():
        assert data == (ws / path).read_bytes(), path


def test_port_to_2_6_0_reports_every_patch_and_refreshes_into_a_series(tmp_path, patches_root):
    names = [p.fields["Patch-Name"] for p in load_series("2.5.1", patches_root).patches]
    ws = tmp_path / "ws"
    first_stop, report = port(ws, "2.6.0", patches_root)
    assert [o.name for o in first_stop] == names
    stops = [i for i, o in enumerate(first_stop) if o.stopped]
    if stops:  # the rebase stopped: a conflict there, nothing replayed after it
        assert first_stop[stops[0]].state == CONFLICTS and first_stop[stops[0]].files
        assert {o.state for o in first_stop[stops[0] + 1:]} <= {PENDING}
    assert [o.name for o in report] == names and PENDING not in {o.state for o in report}
    assert git(ws, "diff", "--stat", "pristine-2.5.1", "pristine")  # 2.6.0's files are not 2.5.1's
    check_refresh(ws, patches_root, "2.6.0", report)


def test_port_to_2_9_1_follows_the_moved_aot_autograd_module(tmp_path, patches_root):
    series = load_series("2.5.1", patches_root)
    movers = [p for p in series.patches if MOVED[0] in p.touched]
    assert movers, "the series no longer patches dispatch_and_compile_graph.py: update this test"
    ws = tmp_path / "ws"
    _, report = port(ws, "2.9.1", patches_root)
    by_name = {o.name: o for o in report}
    for patch in movers:
        assert by_name[patch.fields["Patch-Name"]].moved == dict([MOVED])
        added = [l[1:] for l in patch.path.read_text().split(f"+++ b/{MOVED[0]}\n", 1)[1].split("\ndiff --git")[0]
                 .splitlines() if l.startswith("+")]
        assert all(line in (ws / MOVED[1]).read_text() for line in added)
    assert not (ws / MOVED[0]).exists()
    check_refresh(ws, patches_root, "2.9.1", report)


def test_a_series_stored_once_builds_applies_to_a_checkout_and_refreshes_unchanged(tmp_path, patches_root):
    """2.5.1's patches kept in another release's folder serve build, apply-source, workspace and refresh."""
    from test_series import stored_once

    original = load_series("2.5.1", patches_root)
    expected = build_patched(original, wheel_reader())
    names = [p.name for p in original.patches[::-2]]  # the last patch among them
    stored_once(patches_root, names)
    series = load_series("2.5.1", patches_root)
    assert build_patched(series, wheel_reader()) == expected

    checkout = make_checkout(tmp_path / "pytorch", patches_root)
    apply_source(checkout)
    assert len(git(checkout, "log", "--format=%h", "v2.5.1..HEAD").split()) == len(series.patches)
    assert all((checkout / path).read_bytes() == data for path, data in expected.items())

    folders = {f: {p.name: p.read_bytes() for p in (patches_root / f).iterdir()} for f in ("2.5.0", "2.5.1")}
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=torch_wheel())
    assert "already up to date" in refresh(ws)
    assert {f: {p.name: p.read_bytes() for p in (patches_root / f).iterdir()} for f in folders} == folders

    # Editing a patch stored for both releases gives 2.5.1 its own copy; the kept one is untouched.
    edited = original.patches[-1].name
    message = git(ws, "log", "-1", "--format=%B")
    git(ws, "commit", "-q", "--amend", "-m", message.replace("\n", " on 2.5.1\n", 1))
    out = refresh(ws)
    assert f"written: {edited}, series" in out
    assert f"{edited}\n" in (patches_root / "2.5.1" / "series").read_text()
    assert (patches_root / "2.5.0" / edited).read_bytes() == folders["2.5.0"][edited]
