"""``torch-overlay apply-source``: the series as git commits on a PyTorch source checkout.

The checkout must sit exactly on the release tag the series is for, so every
patch meets the tree it was written against.  The series is applied with one
``git am --3way`` on a new branch; if any patch fails, the am is aborted, the
original branch (or detached HEAD) is checked out again and the new branch
deleted, so the checkout is left as it was found.

What counts as a dirty tree: any staged or unstaged change to a tracked file,
and an untracked (or ignored) file at a path the series creates, because
``git am`` would refuse to overwrite it.  Other untracked and ignored files
(build products of a source build) are left alone and do not block, and
submodules are not looked at: nothing here touches them.

Commits keep the patches' author and author date; the committer is
torch-overlay with the author date as commit date, so applying the series to
the same tag always gives the same commit ids.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import OverlayError
from .series import Patch, Series, default_patches_root, load_series, nearest_supported, supported_versions

COMMITTER_NAME = "torch-overlay developers"
COMMITTER_EMAIL = "torch-overlay@users.noreply.invalid"
CHECKOUT_MARKERS = ("setup.py", "version.txt", "torch/__init__.py")
# version.txt holds "2.6.0a0" at the v2.6.0 tag, as development trees do (seen in Debian's 2.6.0 source package,
# the upstream tree; the release build sets the final version); a plain "2.5.1" is read the same way.
_VERSION_TXT_RE = re.compile(r"(\d+\.\d+\.\d+)(?:a\d+|alpha\d*)?")
# Files git keeps while an operation that owns the work tree is under way.
_IN_PROGRESS = {"rebase-apply": "a git am or rebase", "rebase-merge": "a rebase", "MERGE_HEAD": "a merge",
                "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}
# A repository that holds a series as commits (a workspace, or a checkout after apply-source) says in its git
# config which patches folder and release it belongs to and the commit the series starts from, so that
# ``refresh`` and ``develop`` need nothing but the folder. A workspace starts from its tag "pristine" (the
# default), a source checkout from the release tag.
CONFIG_PATCHES = "torch-overlay.patches"
CONFIG_VERSION = "torch-overlay.version"
CONFIG_BASE = "torch-overlay.base"
# For repositories torch-overlay creates itself: the user's git configuration
# (diff.algorithm, format.*, apply.whitespace, ...) must not change the bytes, and
# no automatic gc may run: a commit of a whole torch tree leaves enough loose objects
# to start a detached ``git gc --auto`` that keeps writing into the repository after
# git returns, so renaming or removing it at once (a failed workspace) then fails.
ISOLATED_GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",
    "GIT_CONFIG_KEY_1": "maintenance.auto",
    "GIT_CONFIG_VALUE_1": "false",
}


def git(repo: Path, *args: str, check: bool = True, isolated: bool = False,
        binary: bool = False) -> subprocess.CompletedProcess:
    """``git -C repo ARGS`` with the committer identity of torch-overlay; output captured
    (as bytes with ``binary``, e.g. for patch text that must survive byte for byte)."""
    env = {**os.environ, **ISOLATED_GIT_ENV} if isolated else None
    cmd = ["git", "-C", str(repo), "-c", f"user.name={COMMITTER_NAME}", "-c", f"user.email={COMMITTER_EMAIL}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=not binary, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        err = proc.stderr or proc.stdout
        err = err.decode(errors="replace") if binary else err
        raise OverlayError(f"'git {' '.join(args)}' failed in {repo}:\n{err.strip()}")
    return proc


def git_out(repo: Path, *args: str, isolated: bool = False) -> str:
    return git(repo, *args, isolated=isolated).stdout.strip()


def operation_in_progress(repo: Path) -> str | None:
    for name, what in _IN_PROGRESS.items():
        if Path(repo, git_out(repo, "rev-parse", "--git-path", name)).exists():
            return what
    return None


@dataclass
class AmFailure:
    patch: Patch
    output: str


def am_series(repo: Path, series: Series, isolated: bool = False) -> AmFailure | None:
    """``git am --3way`` every patch of the series onto HEAD, one commit each.

    On failure git am stops at the failing patch (its state is left for the
    caller to abort or to resolve); that patch is named in the result."""
    if not series.patches:  # git am without files would read stdin
        return None
    start = git_out(repo, "rev-parse", "HEAD", isolated=isolated)
    proc = git(repo, "am", "--3way", "--committer-date-is-author-date", *(str(p.path) for p in series.patches),
               check=False, isolated=isolated)
    if proc.returncode == 0:
        return None
    applied = int(git_out(repo, "rev-list", "--count", f"{start}..HEAD", isolated=isolated))
    failed = series.patches[min(applied, len(series.patches) - 1)]
    return AmFailure(failed, (proc.stdout + proc.stderr).strip())


@dataclass
class Checkout:
    top: Path
    version: str
    series: Series
    head: str           # commit id
    branch: str | None  # None: detached HEAD

    @property
    def position(self) -> str:
        return f"branch {self.branch}" if self.branch else f"detached HEAD {self.head[:12]}"


def release_of_version_txt(text: str, path: Path) -> str:
    m = _VERSION_TXT_RE.fullmatch(text.strip())
    if not m:
        raise OverlayError(f"{path} holds {text.strip()!r}, not a PyTorch release version such as 2.5.1",
                           unchanged="nothing was changed")
    return m.group(1)


def inspect_checkout(checkout: Path) -> Checkout:
    """Everything apply-source refuses on, checked before anything is changed."""
    unchanged = "nothing was changed"
    if checkout.exists() and not checkout.is_dir():
        raise OverlayError(f"{checkout} is a file, not the folder of a PyTorch checkout", unchanged=unchanged,
                           todo="pass the top folder of a clone of https://github.com/pytorch/pytorch")
    if not checkout.is_dir():
        raise OverlayError(f"{checkout} is not a PyTorch checkout: no such folder", unchanged=unchanged)
    proc = git(checkout, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise OverlayError(f"{checkout} is not a PyTorch checkout: it is not inside a git work tree",
                           unchanged=unchanged, todo="git clone https://github.com/pytorch/pytorch")
    top = Path(proc.stdout.strip())
    missing = [m for m in CHECKOUT_MARKERS if not (top / m).is_file()]
    if missing:
        raise OverlayError(f"{top} is not a PyTorch checkout: it has no {', '.join(missing)}", unchanged=unchanged,
                           todo="pass the top folder of a clone of https://github.com/pytorch/pytorch")
    version = release_of_version_txt((top / "version.txt").read_text(), top / "version.txt")
    root = default_patches_root()
    supported = supported_versions(root)
    if version not in supported:
        raise OverlayError(f"the checkout is PyTorch {version} (version.txt); torch-overlay has patch series only "
                           f"for {', '.join(supported) or 'no version'}", unchanged=unchanged,
                           todo=f"{nearest[0]}: check out its tag ('git checkout v{nearest[1]}')"
                           if (nearest := nearest_supported(version, supported)) else "")
    series = load_series(version, root)
    head = git_out(top, "rev-parse", "--verify", "HEAD")
    tag = f"v{version}"
    tagged = git(top, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}", check=False).stdout.strip()
    if head != tagged:
        where = git(top, "describe", "--tags", "--always", "HEAD", check=False).stdout.strip() or head[:12]
        raise OverlayError(f"HEAD of {top} is not at tag {tag} (HEAD: {where}"
                           + ("" if tagged else f"; there is no tag {tag}") + f"); the {version} series applies "
                           f"only to the release (supported: {', '.join(supported)})",
                           unchanged=unchanged, todo=f"git -C {top} checkout {tag}"
                           + ("" if tagged else " (after 'git fetch --tags')"))
    busy = operation_in_progress(top)
    if busy:
        raise OverlayError(f"{busy} is in progress in {top}", unchanged=unchanged,
                           todo="finish or abort it first")
    dirty = git(top, "status", "--porcelain=v1", "--untracked-files=no", "--ignore-submodules=all").stdout.rstrip()
    if series.created:
        blocking = git_out(top, "ls-files", "--others", "--", *sorted(series.created))
        dirty = "\n".join(x for x in (dirty, "\n".join(f"?? {p}" for p in blocking.splitlines())) if x)
    if dirty:
        raise OverlayError(f"the work tree of {top} is not clean:\n{dirty}", unchanged=unchanged,
                           todo="commit, stash or discard these changes (and move untracked files the series "
                                "creates out of the way), then run apply-source again")
    branch = git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip() or None
    return Checkout(top, version, series, head, branch)


def without_git_am_advice(output: str) -> str:
    """git am's output minus its advice on resolving (--continue, --skip, --abort), for when the am
    has already been aborted and that advice would mislead."""
    return "\n".join(line for line in output.splitlines()
                     if not line.startswith("hint:") and "git am --" not in line).strip()


def _restore(co: Checkout, new_branch: str) -> list[str]:
    """Back to the original HEAD and branch; returns what could not be restored."""
    problems = []
    if operation_in_progress(co.top):
        git(co.top, "am", "--abort", check=False)
    back = ["checkout", "-q", co.branch] if co.branch else ["checkout", "-q", "--detach", co.head]
    for args in (back, ["branch", "-q", "-D", new_branch]):
        proc = git(co.top, *args, check=False)
        if proc.returncode != 0:
            problems.append(f"'git {' '.join(args)}': {proc.stderr.strip()}")
    return problems


def apply_source(checkout: Path, branch: str | None = None, build: bool = False) -> str:
    co = inspect_checkout(checkout.resolve())
    new_branch = branch or f"overlay/{co.version}"
    if git(co.top, "check-ref-format", "--branch", new_branch, check=False).returncode != 0:
        raise OverlayError(f"{new_branch!r} is not a valid branch name", unchanged="nothing was changed")
    if git(co.top, "rev-parse", "-q", "--verify", f"refs/heads/{new_branch}", check=False).returncode == 0:
        raise OverlayError(f"branch {new_branch} already exists in {co.top}", unchanged="nothing was changed",
                           todo=f"pass --branch with another name, or delete it: "
                                f"git -C {co.top} branch -D {new_branch}")
    git(co.top, "checkout", "-q", "-b", new_branch)
    try:
        failure = am_series(co.top, co.series)
    except BaseException:
        _restore(co, new_branch)
        raise
    if failure:
        problems = _restore(co, new_branch)
        unchanged = (f"{co.top} is back on {co.position} with a clean tree; branch {new_branch} was deleted"
                     if not problems else "")
        raise OverlayError(
            f"patch {failure.patch.name} of the torch {co.version} series does not apply to {co.top}:\n"
            + without_git_am_advice(failure.output)
            + ("\nrestoring the checkout failed too:\n" + "\n".join(problems) if problems else ""),
            unchanged=unchanged,
            todo="check that the checkout is the unmodified release tag; to port the patch, see "
                 "CONTRIBUTING.md, 'Porting the series to another release'")
    for key, value in ((CONFIG_PATCHES, str(co.series.folder.resolve())), (CONFIG_VERSION, co.version),
                       (CONFIG_BASE, f"v{co.version}")):
        git(co.top, "config", key, value)
    commits = git_out(co.top, "log", "--reverse", "--format=%h %s", f"{co.head}..HEAD").splitlines()
    summary = "\n".join([f"created branch {new_branch} in {co.top} from tag v{co.version} (was on {co.position}) "
                         f"with {len(commits)} commit(s), one per patch of the series; it is checked out:",
                         *(f"  {c}" for c in commits),
                         f"'torch-overlay develop {co.top}' makes the installed torch {co.version} run its Python "
                         f"files; 'torch-overlay refresh {co.top}' writes its commits back to {co.series.folder}"])
    if not build:
        return summary
    print(summary + f"\nrunning: {sys.executable} setup.py develop", flush=True)
    proc = subprocess.run([sys.executable, "setup.py", "develop"], cwd=co.top)
    if proc.returncode != 0:
        raise OverlayError(f"the source build 'python setup.py develop' failed in {co.top} (exit status "
                           f"{proc.returncode}; its output is above)",
                           unchanged=f"branch {new_branch} with the series stays checked out",
                           todo=f"fix the build (see PyTorch's README, 'From Source') and run "
                                f"'{sys.executable} setup.py develop' in {co.top} again")
    return f"built: '{sys.executable} setup.py develop' finished in {co.top} on branch {new_branch}"
