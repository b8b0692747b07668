"""Porting a series to another torch release: the files that moved, and what each patch met.

A port workspace (``torch-overlay workspace NEW DIR --from OLD``) holds OLD's pristine files at
NEW's paths (tag ``pristine-OLD``), OLD's series as commits on them (branch ``series-OLD``), and
NEW's pristine files as a child commit (tag ``pristine``).  ``git rebase --onto pristine
pristine-OLD`` then replays every patch onto NEW with a real three-way merge: it stops at a
conflict with the markers in the files, and the developer goes on the usual git way
(``git rebase --continue``).  ``port_report`` says per patch what happened, from the repository
alone, so it is right at any point of the rebase and after it.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OverlayError
from .series import release_key
from .source_tree import ISOLATED_GIT_ENV, git_out

MOVED_FILES = "moved-files"  # in the patches folder, beside the releases' folders
PRISTINE_TAG = "pristine"
WHITESPACE = "--whitespace=nowarn"  # as the build applies patches


def base_tag(version: str) -> str:
    return f"{PRISTINE_TAG}-{version}"


def series_branch(version: str) -> str:
    return f"series-{version}"


def moved_paths(root: Path, old: str, new: str) -> dict[str, str]:
    """{path in torch OLD: its path in torch NEW} for the files patches/moved-files says moved
    in between (either way: a port may go back to an older release); a file that moved twice
    maps to its last path."""
    table = root / MOVED_FILES
    moves = []
    for number, line in enumerate(table.read_text().splitlines() if table.exists() else [], 1):
        if line.strip() and not line.lstrip().startswith("#"):
            parts = line.split()
            if len(parts) != 3 or not release_key(parts[0]):
                raise OverlayError(f"{table} line {number} is not '<release> <path before> <path after>': {line!r}",
                                   unchanged="nothing was created")
            moves.append(parts)
    mapping: dict[str, str] = {}
    if release_key(old) <= release_key(new):
        for release, before, after in sorted(moves, key=lambda m: release_key(m[0])):
            if release_key(old) < release_key(release) <= release_key(new):
                mapping = {k: after if v == before else v for k, v in mapping.items()}
                mapping.setdefault(before, after)
    else:  # a port back to an older release: the moves in between undone, newest first
        for release, before, after in sorted(moves, key=lambda m: release_key(m[0]), reverse=True):
            if release_key(new) < release_key(release) <= release_key(old):
                mapping = {k: before if v == after else v for k, v in mapping.items()}
                mapping.setdefault(after, before)
    return mapping


def follow_moves(patch: bytes, moves: dict[str, str]) -> bytes:
    """The patch with the paths of its file headers (``diff --git``, ``---``, ``+++``) moved.

    Only the lines between a ``diff --git`` line and its first hunk are headers."""
    if not moves:
        return patch
    moved = {before.encode(): after.encode() for before, after in moves.items()}
    lines = patch.split(b"\n")
    in_header = False
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git a/"):
            in_header = True
            a, _, b = line[len(b"diff --git a/"):].partition(b" b/")
            lines[i] = b"diff --git a/" + moved.get(a, a) + b" b/" + moved.get(b, b)
        elif line.startswith(b"@@"):
            in_header = False
        elif in_header and line[:6] in (b"--- a/", b"+++ b/"):
            lines[i] = line[:6] + moved.get(line[6:], line[6:])
    return b"\n".join(lines)


def _git(ws: Path, *args: str, input: bytes | None = None, index: Path | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, **ISOLATED_GIT_ENV}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    proc = subprocess.run(["git", "-C", str(ws), *args], input=input, capture_output=True, env=env)
    if check and proc.returncode != 0:
        raise OverlayError(f"'git {' '.join(args)}' failed in {ws}:\n{proc.stderr.decode(errors='replace').strip()}")
    return proc


def applies_unchanged(ws: Path, patch: bytes, commit: str) -> bool:
    """Does ``patch``, applied as the build applies it, turn ``commit``'s parent into ``commit``?"""
    with tempfile.TemporaryDirectory(prefix="torch-overlay-index-") as tmp:
        index = Path(tmp, "index")
        _git(ws, "read-tree", f"{commit}^", index=index)
        if _git(ws, "apply", "--cached", WHITESPACE, "-", input=patch, index=index, check=False).returncode:
            return False
        tree = _git(ws, "write-tree", index=index).stdout.decode().strip()
    return tree == git_out(ws, "rev-parse", f"{commit}^{{tree}}", isolated=True)


def _blob(ws: Path, rev: str, path: str) -> bytes | None:
    proc = _git(ws, "cat-file", "blob", f"{rev}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else None


APPLIED, MERGED, CONFLICTS, EDITED, DROPPED, PENDING, NEW = (
    "applied", "merged", "conflicts", "edited", "dropped", "pending", "new")


@dataclass
class PatchOutcome:
    """What one patch met on the new release."""
    name: str                                       # Patch-Name
    state: str                                      # one of the states above
    files: list[str] = field(default_factory=list)  # merged files, or files with conflicts
    stopped: bool = False                           # the rebase stands at this patch
    moved: dict[str, str] = field(default_factory=dict)  # the moves this patch followed

    def render(self) -> str:
        files = ", ".join(self.files)
        text = {
            APPLIED: "applied as it is",
            MERGED: f"merged (three-way) in {files}",
            CONFLICTS: f"conflicts in {files}" + (": git rebase stopped here" if self.stopped
                                                    else ", resolved by hand"),
            EDITED: "merged, then edited by hand",
            DROPPED: "dropped: its change is already in the new release (or the patch was skipped)",
            PENDING: "not replayed yet",
            NEW: "a new commit, not from the ported series",
        }[self.state]
        if self.moved:
            text += "; followed " + ", ".join(f"{a} -> {b}" for a, b in self.moved.items())
        return f"  {self.name}: {text}"


def _patch_name(ws: Path, commit: str) -> str:
    message = git_out(ws, "log", "-1", "--format=%B", commit, isolated=True)
    m = re.search(r"^Patch-Name: *(\S+)", message, re.M)
    return m.group(1) if m else commit[:12]


def _changed(ws: Path, a: str, b: str) -> list[str]:
    return git_out(ws, "diff", "--name-only", a, b, isolated=True).splitlines()


def _classify(ws: Path, scratch: Path, source: str, commit: str, name: str) -> PatchOutcome:
    """How the replayed ``commit`` came from ``source``, the patch as it was on the old release:
    git's own cherry-pick of ``source`` onto ``commit``'s parent, redone in the ``scratch`` work tree."""
    if applies_unchanged(ws, _git(ws, "diff", "--binary", f"{source}^", source).stdout, commit):
        return PatchOutcome(name, APPLIED)
    _git(scratch, "checkout", "-q", "--force", "--detach", f"{commit}^")
    picked = _git(scratch, "cherry-pick", "--no-commit", source, check=False)
    conflicts = git_out(scratch, "diff", "--name-only", "--diff-filter=U", isolated=True).splitlines()
    if picked.returncode and not conflicts:
        raise OverlayError(f"'git cherry-pick {source}' failed in {scratch}:\n{picked.stderr.decode().strip()}")
    same = not conflicts and _git(scratch, "write-tree").stdout.decode().strip() == git_out(
        ws, "rev-parse", f"{commit}^{{tree}}", isolated=True)
    _git(scratch, "reset", "-q", "--hard")
    _git(scratch, "cherry-pick", "--quit", check=False)
    if conflicts:
        return PatchOutcome(name, CONFLICTS, conflicts)
    merged = [path for path in _changed(ws, f"{source}^", source)
              if _blob(ws, f"{source}^", path) != _blob(ws, f"{commit}^", path)]
    return PatchOutcome(name, MERGED if same else EDITED, merged)


def port_report(ws: Path, old: str, moves: dict[str, str]) -> list[PatchOutcome]:
    """Per patch of torch OLD's series, in order, what it met in the workspace's release; then
    any commit on the new release that does not come from the series."""
    sources = git_out(ws, "rev-list", "--reverse", f"{base_tag(old)}..{series_branch(old)}", isolated=True).split()
    done = {}
    for commit in git_out(ws, "rev-list", "--reverse", f"{PRISTINE_TAG}..HEAD", isolated=True).split():
        done[_patch_name(ws, commit)] = commit
    stopped = _git(ws, "rev-parse", "-q", "--verify", "REBASE_HEAD", check=False).stdout.decode().strip()
    stopped_at = sources.index(stopped) if stopped in sources else len(sources)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="torch-overlay-report-") as tmp:
        scratch = Path(tmp, "tree")
        _git(ws, "worktree", "add", "-q", "--detach", str(scratch), PRISTINE_TAG)
        try:
            outcomes = _outcomes(ws, scratch, sources, done, stopped_at, moves)
        finally:
            _git(ws, "worktree", "remove", "--force", str(scratch), check=False)
            _git(ws, "worktree", "prune", check=False)
    return outcomes + [PatchOutcome(name, NEW) for name in done]


def _outcomes(ws: Path, scratch: Path, sources: list[str], done: dict[str, str], stopped_at: int,
              moves: dict[str, str]) -> list[PatchOutcome]:
    outcomes = []
    for i, source in enumerate(sources):
        name = _patch_name(ws, source)
        followed = {a: b for a, b in moves.items() if b in _changed(ws, f"{source}^", source)}
        if name in done:
            outcome = _classify(ws, scratch, source, done.pop(name), name)
        elif i == stopped_at:
            unmerged = git_out(ws, "diff", "--name-only", "--diff-filter=U", isolated=True).splitlines()
            outcome = PatchOutcome(name, CONFLICTS, unmerged or _changed(ws, f"{source}^", source), stopped=True)
        else:
            outcome = PatchOutcome(name, DROPPED if i < stopped_at else PENDING)
        outcome.moved = followed
        outcomes.append(outcome)
    return outcomes


def render_report(old: str, new: str, outcomes: list[PatchOutcome]) -> str:
    return "\n".join([f"the torch {old} series on torch {new}, patch by patch:",
                      *(o.render() for o in outcomes)])
