"""torch-overlay apply-source on git checkouts holding the real torch 2.5.1 files."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from source_fixtures import (FAILING_SETUP_PY, checkout_state, git, make_checkout, overlay_env, patches_copy,
                             wheel_reader)
from scratch_torch import REPO
from torch_overlay.build import build_patched
from torch_overlay.errors import OverlayError
from torch_overlay.series import load_series
from torch_overlay.source_tree import apply_source, release_of_version_txt


@pytest.fixture
def patches_root(tmp_path, monkeypatch):
    root = patches_copy(tmp_path / "patches")
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(root))
    return root


@pytest.fixture
def checkout(tmp_path, patches_root):
    return make_checkout(tmp_path / "pytorch", patches_root)


def refused(checkout, match, **kwargs) -> OverlayError:
    """apply_source must raise and leave HEAD, branch, refs, index and files exactly as they were."""
    before = checkout_state(checkout)
    with pytest.raises(OverlayError, match=match) as info:
        apply_source(checkout, **kwargs)
    assert checkout_state(checkout) == before
    return info.value


def test_applies_one_commit_per_patch_on_a_new_branch(checkout, patches_root):
    tag_commit = git(checkout, "rev-parse", "v2.5.1").strip()
    out = apply_source(checkout)
    series = load_series("2.5.1", patches_root)
    assert git(checkout, "symbolic-ref", "--short", "HEAD").strip() == "overlay/2.5.1"
    assert "created branch overlay/2.5.1" in out
    subjects = git(checkout, "log", "--reverse", "--format=%s", f"{tag_commit}..overlay/2.5.1").splitlines()
    assert subjects == [p.subject for p in series.patches]
    authors = git(checkout, "log", "--reverse", "--format=%an <%ae> %aD|%cn <%ce> %cD", f"{tag_commit}..HEAD")
    for patch, line in zip(series.patches, authors.splitlines()):
        header = patch.path.read_text().split("\n\n", 1)[0]
        author, committer = line.split("|")
        assert f"From: {author.split(' <')[0]}" in header and f"Date: {author.split('> ', 1)[1]}" in header
        assert committer == author  # torch-overlay developers, committed at the author date
    for path, data in build_patched(series, wheel_reader()).items():
        assert (checkout / path).read_bytes() == data, path
    assert git(checkout, "status", "--porcelain=v1") == ""
    assert git(checkout, "rev-parse", "v2.5.1").strip() == tag_commit


def test_same_tag_gives_the_same_commit_ids(tmp_path, checkout, patches_root):
    other = make_checkout(tmp_path / "other", patches_root)
    apply_source(checkout)
    apply_source(other)
    assert git(checkout, "rev-parse", "HEAD") == git(other, "rev-parse", "HEAD")


def test_branch_option_and_untracked_files_elsewhere(checkout):
    git(checkout, "switch", "-q", "-c", "work")
    (checkout / "notes.txt").write_text("mine\n")          # untracked, not a path the series creates
    (checkout / "build").mkdir()
    (checkout / "build" / "_C.so").write_bytes(b"\x7fELF")  # ignored build product
    apply_source(checkout, branch="fx-annotations")
    assert git(checkout, "symbolic-ref", "--short", "HEAD").strip() == "fx-annotations"
    assert (checkout / "notes.txt").read_text() == "mine\n"
    assert (checkout / "build" / "_C.so").read_bytes() == b"\x7fELF"
    assert "work" in git(checkout, "branch", "--format=%(refname:short)").split()


def test_build_runs_setup_py_develop_on_the_patched_tree(checkout, capfd):
    out = apply_source(checkout, build=True)
    ran = (checkout / "develop-ran.txt").read_text()
    assert f"python={sys.executable}\n" in ran
    assert "annotate=True" in ran  # setup.py saw the patched torch/fx/traceback.py
    streamed = capfd.readouterr().out
    assert "created branch overlay/2.5.1" in streamed
    assert "setup.py develop: building torch in place" in streamed
    assert "finished" in out


def test_failing_build_is_an_error_and_keeps_the_branch(tmp_path, patches_root, capfd):
    checkout = make_checkout(tmp_path / "pytorch", patches_root, setup_py=FAILING_SETUP_PY)
    with pytest.raises(OverlayError, match=r"setup.py develop' failed .*exit status 3") as info:
        apply_source(checkout, build=True)
    assert "branch overlay/2.5.1 with the series stays checked out" in info.value.unchanged
    assert git(checkout, "symbolic-ref", "--short", "HEAD").strip() == "overlay/2.5.1"
    assert "compiler exploded" in capfd.readouterr().out


def test_refuses_a_folder_that_is_no_git_work_tree(tmp_path, patches_root):
    (tmp_path / "plain").mkdir()
    with pytest.raises(OverlayError, match="not a PyTorch checkout: it is not inside a git work tree"):
        apply_source(tmp_path / "plain")
    with pytest.raises(OverlayError, match="not a PyTorch checkout: no such folder"):
        apply_source(tmp_path / "missing")


def test_refuses_a_file_saying_it_is_a_file(tmp_path, patches_root):
    path = tmp_path / "pytorch.tar"
    path.write_text("not a folder\n")
    with pytest.raises(OverlayError, match=r"pytorch.tar is a file, not the folder of a PyTorch checkout"):
        apply_source(path)


def test_refuses_a_git_repository_that_is_not_pytorch(checkout):
    git(checkout, "rm", "-q", "version.txt", "torch/__init__.py")
    git(checkout, "commit", "-q", "-m", "not torch any more")
    error = refused(checkout, "not a PyTorch checkout")
    assert "it has no version.txt, torch/__init__.py" in error.what


@pytest.mark.parametrize("text, release", [("2.5.1", "2.5.1"), ("2.5.1\n", "2.5.1"), ("2.5.0a0\n", "2.5.0"),
                                           ("2.6.0alpha\n", "2.6.0"), ("2.5.10", "2.5.10")])
def test_version_txt_release(tmp_path, text, release):
    assert release_of_version_txt(text, tmp_path / "version.txt") == release


@pytest.mark.parametrize("text", ["2.5.1rc1", "2.5", "v2.5.1", "2.5.1a", ""])
def test_version_txt_that_is_no_release(tmp_path, text):
    with pytest.raises(OverlayError, match="not a PyTorch release version"):
        release_of_version_txt(text, tmp_path / "version.txt")


@pytest.mark.parametrize("version, tag", [("2.4.1", "v2.5.1"), ("2.12.0", "v2.12.1")])
def test_refuses_a_version_without_series(tmp_path, patches_root, version, tag):
    checkout = make_checkout(tmp_path / "pytorch", patches_root, version_txt=f"{version}a0\n", tag=f"v{version}")
    error = refused(checkout, rf"the checkout is PyTorch {re.escape(version)} .*patch series only for 2\.5\.1, ")
    assert f"'git checkout {tag}'" in error.todo


def test_refuses_head_away_from_the_release_tag(checkout):
    git(checkout, "switch", "-q", "-c", "dev")
    (checkout / "setup.py").write_text("# later work\n")
    git(checkout, "commit", "-q", "-am", "later work")
    refused(checkout, r"HEAD of .* is not at tag v2\.5\.1 \(HEAD: v2\.5\.1-1-g")
    git(checkout, "tag", "-d", "v2.5.1")
    refused(checkout, r"not at tag v2\.5\.1 .*there is no tag v2\.5\.1")


def test_refuses_a_dirty_tree_naming_the_paths(checkout):
    with open(checkout / "torch/fx/traceback.py", "a") as f:
        f.write("# local edit\n")
    (checkout / "staged.py").write_text("x = 1\n")
    git(checkout, "add", "staged.py")
    error = refused(checkout, "work tree of .* is not clean")
    assert error.what.splitlines()[1:] == ["A  staged.py", " M torch/fx/traceback.py"]


def test_refuses_an_untracked_file_where_the_series_creates_one(tmp_path, patches_root):
    # A series whose extra patch creates torch/fx/annotation_notes.py, made the way a developer would.
    from torch_overlay.workspace import create_workspace, refresh
    ws = tmp_path / "ws"
    create_workspace("2.5.1", ws, wheel=None, extra=[])
    (ws / "torch/fx/annotation_notes.py").write_text('"""Notes."""\n')
    git(ws, "add", "torch/fx/annotation_notes.py")
    git(ws, "commit", "-q", "-m", "fx: annotation notes\n\nDescription: a new module\nOrigin: local\n"
        "Forwarded: no\nApplied-Upstream: no\nPatch-Name: local-annotation-notes")
    refresh(ws)
    checkout = make_checkout(tmp_path / "pytorch", patches_root)
    (checkout / "torch/fx/annotation_notes.py").write_text("mine\n")
    error = refused(checkout, "is not clean")
    assert "?? torch/fx/annotation_notes.py" in error.what
    (checkout / "torch/fx/annotation_notes.py").unlink()
    apply_source(checkout)
    assert (checkout / "torch/fx/annotation_notes.py").read_text() == '"""Notes."""\n'


def test_refuses_an_existing_branch(checkout):
    git(checkout, "branch", "overlay/2.5.1")
    error = refused(checkout, "branch overlay/2.5.1 already exists")
    assert "--branch" in error.todo
    refused(checkout, "not a valid branch name", branch="bad..name")


def _first_removed_line(patch_text: str) -> str:
    body = patch_text.split("\n@@", 1)[1]
    return next(line[1:] for line in body.splitlines() if line.startswith("-") and not line.startswith("---"))


@pytest.mark.parametrize("start", ["detached", "branch"])
def test_conflicting_patch_leaves_the_checkout_as_found(checkout, patches_root, start):
    """The tag holds a local edit of a line the first patch changes: git am --3way conflicts."""
    first = load_series("2.5.1", patches_root).patches[0]
    target = checkout / first.touched[0]
    line = _first_removed_line(first.path.read_text())
    text = target.read_text()
    assert text.count(line + "\n") >= 1
    target.write_text(text.replace(line + "\n", line + "  # edited at the tag\n", 1))
    git(checkout, "commit", "-q", "-am", "edit a line the series changes")
    git(checkout, "tag", "-f", "v2.5.1")
    git(checkout, "checkout", "-q", "--detach", "v2.5.1")
    if start == "branch":
        git(checkout, "switch", "-q", "-c", "release")
    error = refused(checkout, f"patch {first.name} of the torch 2.5.1 series does not apply")
    assert "branch overlay/2.5.1 was deleted" in error.unchanged
    # The am was aborted already: git's advice to --continue / --skip / --abort it would mislead.
    assert "git am --" not in error.what and "hint:" not in error.what, error.what


def test_failing_last_patch_drops_the_commits_already_made(checkout, patches_root):
    series = load_series("2.5.1", patches_root)
    last = series.patches[-1].path
    head, sep, diff = last.read_text().partition("\n@@")
    lines = diff.splitlines(keepends=True)
    i = next(i for i, l in enumerate(lines) if l.startswith(" ") and l.strip())
    lines[i] = " this context line is not in the file\n"
    last.write_text(head + sep + "".join(lines))
    error = refused(checkout, f"patch {last.name} of the torch 2.5.1 series does not apply")
    assert "clean tree" in error.unchanged


def test_cli_reports_a_refusal_with_status_2(checkout, patches_root):
    git(checkout, "branch", "overlay/2.5.1")
    before = checkout_state(checkout)
    proc = subprocess.run([sys.executable, "-m", "torch_overlay", "apply-source", str(checkout)],
                          env=overlay_env(patches_root), capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: branch overlay/2.5.1 already exists")
    assert "unchanged: nothing was changed" in proc.stderr
    assert checkout_state(checkout) == before
