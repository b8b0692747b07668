"""All-or-nothing replacement of several files in an installed package.

A transaction writes every new file into a staging folder on the same
filesystem, checks that every target can be replaced, then writes
``journal.json`` listing the moves (the commit point) and makes them by
rename.  Before it replaces a file it keeps the old one in the staging folder
(a hard link, so the old file stays in place until the rename), which makes
every move undoable.

- A crash (even ``kill -9``) before the journal exists leaves the package
  untouched; after it, the next command replays the journal: moves already
  made are skipped, so replaying is idempotent.
- An error while moving (a file that turned out not to be replaceable) undoes
  the moves made so far, newest first, from the kept files; a ``rollback``
  marker written first makes an interrupted undo continue as an undo.
- A *barrier* file, if given, is replaced first and put back last: for torch
  this is ``torch/__init__.py`` with a stub that refuses to import, so no
  process can import a half-changed package, and nothing is added to the
  package when no transaction is pending.  The barrier's ``check`` runs once
  the stub is in place, before any other move: it looks for what the stub
  cannot stop (a process that imported the package before it), and an error
  there undoes the stub's move, so the command changes nothing.

Paths in the journal are relative (the root relative to the staging folder,
targets relative to the root), so a copy of an environment with a pending
journal recovers into itself.  Every command runs :func:`recover` first,
under the same lock, so it always finds the package fully before or fully
after a transaction.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from .errors import OverlayError, warn

STAGING_NAME = "overlay-txn"
JOURNAL_NAME = "journal.json"
ROLLBACK_NAME = "rollback"  # present: the moves are being undone
PROBES_NAME = "probes"      # the probe files check_replaceable() may create, for recovery to remove
DONE_NAME = "done"          # the journal, renamed once every move is made: only clean-up is left
JOURNAL_FORMAT = 2  # 2: each move also records what its target holds before and after it
FAILPOINT_ENV = "TORCH_OVERLAY_FAILPOINT"
_FAULTS = {"enospc": errno.ENOSPC, "eperm": errno.EPERM}


def failpoint(name: str) -> None:
    """Test hook.  ``TORCH_OVERLAY_FAILPOINT`` holds comma-separated specs:
    ``<name>`` kills this process with SIGKILL at that point, ``<name>:sleep``
    announces itself on stderr and sleeps (a test acts meanwhile),
    ``<name>:announce`` only announces itself (a test times a kill from there),
    ``<name>:pause`` announces itself and stops (SIGSTOP; a test acts, then sends SIGCONT),
    and ``<name>:enospc`` / ``<name>:eperm`` raise that OSError there."""
    for spec in os.environ.get(FAILPOINT_ENV, "").split(","):
        if spec == name:
            os.kill(os.getpid(), signal.SIGKILL)
        if spec in (f"{name}:sleep", f"{name}:announce", f"{name}:pause"):
            print(f"failpoint {name} reached", file=sys.stderr, flush=True)
        if spec == f"{name}:sleep":
            time.sleep(600)
        if spec == f"{name}:pause":
            os.kill(os.getpid(), signal.SIGSTOP)
        for fault, code in _FAULTS.items():
            if spec == f"{name}:{fault}":
                raise OSError(code, f"{os.strerror(code)} (failpoint {name})")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def exclusive_lock(directory: Path):
    """Hold an exclusive, non-blocking flock on ``directory`` itself.

    Locking the directory (rather than a lock file) leaves nothing behind in
    the installation for ``pip uninstall`` to trip over."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OverlayError(
                    f"another torch-overlay command is working on {directory}",
                    unchanged="this command changed nothing",
                    todo="wait for the other command to finish, then run this one again",
                ) from None
            raise
        yield
    finally:
        os.close(fd)


class JournalError(OverlayError):
    """A pending transaction that cannot be finished or undone as things are."""


@dataclass(frozen=True)
class _Move:
    target: str          # relative to the root
    staged: str | None   # name in the staging folder to move there; None: remove the target
    existed: bool        # the target existed before this move (when not, undoing it removes the target)
    # What the target holds before and after this move (_fingerprint); "" in a journal that did not record it.
    before: str | None = ""
    after: str | None = ""


def _fingerprint(path: Path) -> str | None:
    """None for an absent path, "dir" for a folder, "link:<target>" for a symbolic link (``develop`` links
    files to a checkout whose edits must not look like someone else's change), else the sha256 of the
    file's bytes."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_dir():
        return "dir"
    return hashlib.sha256(path.read_bytes()).hexdigest()


class JournalDiscarded(JournalError):
    """A pending journal that no longer describes the files (something replaced them since): dropped.
    ``created``: the files the interrupted command had created (absent before it), as root-relative paths with
    what it wrote there (_fingerprint); a reinstall of the package leaves them, since its RECORD never listed
    them (see remove_created_leftovers)."""

    root: Path | None = None
    created: tuple = ()
    # the deletions the interrupted command had planned, with what each target held before it (a revert
    # removes the files the series created, which no RECORD of a reinstall lists either)
    deleted: tuple = ()


def remove_unlisted_deletions(discarded: JournalDiscarded, listed: set[str]) -> list[str]:
    """Finish each deletion ``discarded`` had planned whose target still holds exactly what the interrupted
    command meant to delete and that ``listed`` (the RECORD now on disk) does not name: a reinstall neither
    removed nor rewrote it (a .pyc of a module the series created, say); the paths removed."""
    removed = []
    for target, held in discarded.deleted:
        path = discarded.root / target
        if target not in listed and path.is_file() and not path.is_symlink() and _fingerprint(path) == held:
            path.unlink()
            removed.append(target)
    return removed


def remove_created_leftovers(discarded: JournalDiscarded) -> list[str]:
    """Remove each file of ``discarded.created`` that still holds exactly what the interrupted command wrote
    (a file that differs is someone else's and stays); the paths removed."""
    removed = []
    for target, written in discarded.created:
        path = discarded.root / target
        if _fingerprint(path) == written and path.is_file():
            path.unlink()
            removed.append(target)
    return removed


@dataclass(frozen=True)
class Barrier:
    """A file replaced by ``stub`` for the duration of the moves (see the module docstring); ``check``, if
    given, runs once the stub is in place and before any other move, and may refuse (raise) the change: its
    error comes out after the stub's move is undone. Recovery runs no check: it has no live command to ask."""

    target: str
    stub: bytes
    check: Callable[[], None] | None = None


class Transaction:
    """Stage writes and deletions under ``root``; :meth:`commit` makes them real."""

    def __init__(self, root: Path, staging_parent: Path, barrier: Barrier | None = None):
        self.root = root
        self.staging = staging_parent / STAGING_NAME
        self.barrier = barrier
        self._planned: list[tuple[str, str | None]] = []  # (target, staged name or None = delete)
        self._count = 0
        self._made_staging = False

    # -- staging ------------------------------------------------------------------------------

    def _make_staging(self) -> None:
        if self._made_staging:
            return
        try:
            self.staging.mkdir()  # an old one is recover()'s to deal with, never ours to remove
        except OSError as e:
            raise OverlayError(f"cannot create the staging folder {self.staging}: {e.strerror or e}",
                               unchanged="nothing was changed",
                               todo="run torch-overlay as the user that owns this environment, or use "
                                    "'torch-overlay rebuild-wheel' and install that wheel instead") from None
        self._made_staging = True

    def _stage(self, produce: Callable[[Path], None]) -> str:
        self._make_staging()
        name = f"s{self._count}"
        self._count += 1
        try:
            produce(self.staging / name)
        except OSError as e:
            self.abandon()
            raise OverlayError(f"could not stage the new files in {self.staging}: {e.strerror or e}",
                               unchanged="nothing was changed (what was staged has been removed)",
                               todo="free some disk space (or fix the permission named above), then run "
                                    "the command again") from None
        except BaseException:
            self.abandon()
            raise
        return name

    def write_with(self, relpath: str, produce: Callable[[Path], None]) -> Path:
        """Stage the file ``produce(path)`` writes at ``path`` as the new ``relpath``."""
        def durably(path: Path) -> None:
            produce(path)
            _fsync(path)

        name = self._stage(durably)
        self._planned.append((relpath, name))
        return self.staging / name

    def write(self, relpath: str, data: bytes) -> Path:
        return self.write_with(relpath, lambda path: path.write_bytes(data))

    def write_tree(self, relpath: str, files: dict[str, bytes]) -> None:
        """Stage a whole folder (``files`` relative to it) as the new ``relpath``, moved in by one rename."""
        def produce(folder: Path) -> None:
            for name, data in files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                write_file_durably(folder / name, data)

        self._planned.append((relpath, self._stage(produce)))

    def delete(self, relpath: str) -> None:
        """Remove a file or a whole folder (relative to root)."""
        self._planned.append((relpath, None))

    def abandon(self) -> None:
        """Drop what was staged (before the commit point only)."""
        if self._made_staging:
            shutil.rmtree(self.staging, ignore_errors=True)

    # -- commit -------------------------------------------------------------------------------

    def _moves(self) -> list[_Move]:
        """The planned moves with the barrier replaced first and put back last."""
        planned = list(self._planned)
        if self.barrier is not None:
            target = self.barrier.target
            last = [m for m in planned if m[0] == target][-1:]
            if not last:  # the barrier's own bytes come back: keep them (same inode, same mtime)
                last = [(target, self._stage(lambda path: _keep(self.root / target, path)))]
            stub = self._stage(lambda path: write_file_durably(path, self.barrier.stub))
            planned = [(target, stub)] + [m for m in planned if m[0] != target] + last
        holds: dict[str, str | None] = {}  # what each target holds after the moves planned so far
        moves = []
        for target, staged in planned:
            before = holds[target] if target in holds else _fingerprint(self.root / target)
            after = _fingerprint(self.staging / staged) if staged is not None else None
            moves.append(_Move(target, staged, before is not None, before, after))
            holds[target] = after
        return moves

    def commit(self) -> list[str]:
        """Make every staged change real; returns warnings about clean-up after the commit point."""
        self._make_staging()
        try:
            moves = self._moves()
            failpoint("staged")
            check_replaceable(self.root, self.staging, [m.target for m in moves])
            failpoint("probed")
            journal = {"format": JOURNAL_FORMAT, "root": os.path.relpath(self.root, self.staging),
                       "moves": [[m.target, m.staged, m.existed, m.before, m.after] for m in moves]}
            tmp = self.staging / (JOURNAL_NAME + ".tmp")
            write_file_durably(tmp, json.dumps(journal).encode())
            os.replace(tmp, self.staging / JOURNAL_NAME)
            _fsync(self.staging)
        except OSError as e:
            self.abandon()
            raise OverlayError(f"could not write the journal in {self.staging}: {e.strerror or e}",
                               unchanged="nothing was changed (what was staged has been removed)",
                               todo="free some disk space, then run the command again") from None
        except BaseException:
            self.abandon()
            raise
        failpoint("journal")
        _run(self.staging, self.root, moves, self.barrier and self.barrier.check)
        return _finish(self.staging, self.root, moves)


def _keep(source: Path, path: Path) -> None:
    """``path`` becomes ``source`` itself (a hard link) or, where links fail, a copy with its mtime; a
    symbolic link is kept as a link to the same target."""
    if source.is_symlink():
        os.symlink(os.readlink(source), path)
        return
    try:
        os.link(source, path)
    except OSError:
        shutil.copy2(source, path)


def _nearest_folder(path: Path) -> Path:
    while not path.is_dir():
        path = path.parent
    return path


def _probe_path(root: Path, target: str) -> Path:
    return _nearest_folder((root / target).parent) / f".{STAGING_NAME}-probe"


def check_replaceable(root: Path, staging: Path, targets: list[str]) -> None:
    """Refuse, before the commit point, when a target cannot be replaced by rename from ``staging``.

    Each target's folder is probed by creating a file in it.  An existing file
    is then hard-linked beside itself and the link removed, which fails on an
    immutable or append-only file (``chattr +i``), whose replacement would fail;
    where the kernel refuses hard links to another user's file
    (protected_hardlinks) that probe cannot tell, and a failed rename is undone
    at commit time instead.  The probe paths are listed in the staging folder
    first, so that recovery removes a probe a kill left behind."""
    targets = list(dict.fromkeys(targets))
    staging_dev = os.stat(staging).st_dev
    probes = sorted({os.path.relpath(_probe_path(root, t), staging) for t in targets})
    write_file_durably(staging / PROBES_NAME, "\n".join(probes).encode())
    for target in targets:
        path = root / target
        probe = _probe_path(root, target)
        folder = probe.parent
        try:
            if os.stat(folder).st_dev != staging_dev:
                raise OverlayError(f"{folder} is on another filesystem than {staging}, so {target} cannot be "
                                   "replaced by rename", unchanged="nothing was changed",
                                   todo="use 'torch-overlay rebuild-wheel' and install that wheel instead")
            os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            failpoint("probe")
            os.unlink(probe)
            if path.is_file() and not path.is_symlink() and _may_link(path):
                try:
                    os.link(path, probe)
                except OSError as e:
                    if e.errno not in (errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                        raise
                else:
                    os.unlink(probe)
        except OSError as e:
            if os.path.lexists(probe):
                os.unlink(probe)
            raise OverlayError(
                f"cannot replace {path}: {e.strerror or e}", unchanged="nothing was changed",
                todo=f"make {folder} and the files in it writable (see 'ls -l' and 'lsattr'), or run torch-overlay "
                     "as the user that owns this environment, or use 'torch-overlay rebuild-wheel' and install "
                     "that wheel instead") from None


def _remove_probes(staging: Path) -> None:
    try:
        listed = (staging / PROBES_NAME).read_text().split("\n")
    except (OSError, UnicodeDecodeError):
        return
    for rel in listed:  # relative to the staging folder; only ever our probe's name
        if rel and not os.path.isabs(rel) and PurePosixPath(rel).name == f".{STAGING_NAME}-probe":
            (staging / rel).unlink(missing_ok=True)


def _may_link(path: Path) -> bool:
    """Whether fs.protected_hardlinks lets this user link ``path`` (owner, or read and write access)."""
    return os.geteuid() in (0, os.stat(path).st_uid) or os.access(path, os.R_OK | os.W_OK)


# -- making and undoing the moves (shared by commit and recovery) ---------------------------------

class _MoveFailed(Exception):
    def __init__(self, target: Path, error: OSError):
        super().__init__(f"{target}: {error}")
        self.target, self.error = target, error


def _forward(staging: Path, root: Path, moves: list[_Move], after_first: Callable[[], None] | None = None) -> None:
    """Make the moves in order; ``after_first`` (the barrier's check) runs once the first move is made."""
    for i, m in enumerate(moves):
        target, backup = root / m.target, staging / f"b{i}"
        try:
            if m.staged is None:
                if os.path.lexists(target):
                    os.replace(target, backup)
            elif os.path.lexists(staging / m.staged):  # absent: this move was made before an interruption
                if os.path.lexists(target) and not os.path.lexists(backup):
                    if target.is_dir() and not target.is_symlink():
                        os.replace(target, backup)
                    else:
                        _keep(target, backup)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / m.staged, target)
            failpoint(f"move:{i}")
        except OSError as e:
            raise _MoveFailed(target, e) from None
        if i == 0 and after_first is not None:
            after_first()
    failpoint("renamed")


def _backward(staging: Path, root: Path, moves: list[_Move]) -> None:
    """Undo the moves, newest first.  Each step first takes the new file back out
    to its staged name, then puts the kept one back, so a repeat finds it done."""
    for i in reversed(range(len(moves))):
        m = moves[i]
        target, backup = root / m.target, staging / f"b{i}"
        if m.staged is not None and not os.path.lexists(staging / m.staged) and os.path.lexists(target):
            os.replace(target, staging / m.staged)
        if os.path.lexists(backup):
            os.replace(backup, target)
        failpoint(f"rollback:{i}")


def _run(staging: Path, root: Path, moves: list[_Move], after_first: Callable[[], None] | None = None) -> None:
    """Make the moves; if one fails, undo those made and raise an error saying so; an error raised by
    ``after_first`` (see :func:`_forward`) comes out once the moves made are undone."""
    try:
        _forward(staging, root, moves, after_first)
    except _MoveFailed as failed:
        _undo(staging, root, moves, failed.target, failed.error.strerror or str(failed.error))
    except BaseException:  # SIGTERM or ^C half-way: leave the package as it was
        _undo(staging, root, moves, None, "interrupted")
        raise


def _undo(staging: Path, root: Path, moves: list[_Move], failed: Path | None, why: str) -> None:
    try:
        write_file_durably(staging / ROLLBACK_NAME, b"")
        _fsync(staging)
        _backward(staging, root, moves)
    except OSError as e:
        what = f"replacing {failed} failed ({why})" if failed else f"a torch-overlay command was {why}"
        raise JournalError(
            f"{what}, and putting back the files already replaced failed too: {e.filename}: {e.strerror or e}",
            unchanged=f"the journal in {staging} records what is left to undo; until it is undone, "
                      "'import torch' refuses to run rather than use a half-changed torch",
            todo="fix the cause (disk space, permissions, 'lsattr'), then run 'torch-overlay status', which "
                 "finishes the undo") from None
    shutil.rmtree(staging, ignore_errors=True)
    if failed is not None:
        raise OverlayError(f"cannot replace {failed}: {why}",
                           unchanged="nothing was changed: the files already replaced were put back",
                           todo="fix the cause (disk space, permissions, 'lsattr'), then run the command again")


def _finish(staging: Path, root: Path, moves: list[_Move]) -> list[str]:
    """Clean-up after every move is made: nothing here can make the change fail, only warn."""
    try:
        for folder in {(root / m.target).parent for m in moves}:
            if folder.is_dir():
                _fsync(folder)
        failpoint("moved")
        os.replace(staging / JOURNAL_NAME, staging / DONE_NAME)
        failpoint("done")
        shutil.rmtree(staging)
    except OSError as e:
        return [f"the change is complete, but removing {staging} failed ({e.strerror or e}); "
                "the next torch-overlay command removes it"]
    return []


# -- recovery ---------------------------------------------------------------------------------------

def _read_journal(staging: Path) -> tuple[Path, list[_Move]]:
    path = staging / JOURNAL_NAME

    def corrupt(why: str) -> JournalError:
        return JournalError(
            f"the journal of an interrupted torch-overlay command, {path}, is unreadable ({why})",
            unchanged="nothing was changed; the files it lists may be half-replaced",
            todo=f"reinstall the package (pip install --force-reinstall --no-deps), then remove {staging}")

    try:
        journal = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise corrupt(getattr(e, "strerror", None) or str(e) or "empty") from None
    if not isinstance(journal, dict) or journal.get("format") not in (1, JOURNAL_FORMAT):
        raise corrupt(f"not a format-{JOURNAL_FORMAT} journal")
    fields = 3 if journal["format"] == 1 else 5  # format 1 (older torch-overlay): no fingerprints
    root_rel, moves = journal.get("root"), journal.get("moves")
    if not isinstance(root_rel, str) or os.path.isabs(root_rel) or not isinstance(moves, list):
        raise corrupt("no relative 'root' or no 'moves' list")
    out = []
    for m in moves:
        ok = (isinstance(m, list) and len(m) == fields and isinstance(m[0], str) and isinstance(m[2], bool)
              and (m[1] is None or (isinstance(m[1], str) and "/" not in m[1] and m[1] not in ("", ".", "..")))
              and all(f is None or isinstance(f, str) for f in m[3:]))
        parts = PurePosixPath(m[0]).parts if ok else ()
        if not ok or not parts or PurePosixPath(m[0]).is_absolute() or ".." in parts:
            raise corrupt(f"bad move {m!r}")
        out.append(_Move(*m))
    return (staging / root_rel).resolve(), out


def _unexpected_targets(staging: Path, root: Path, moves: list[_Move]) -> list[str]:
    """Targets that hold neither what the journal says they held before the interrupted command nor what
    its moves made so far put there: something replaced them since (pip reinstalling the package)."""
    expected: dict[str, str | None] = {}
    for m in moves:
        made = (m.staged is not None and not os.path.lexists(staging / m.staged)) or \
               (m.staged is None and not os.path.lexists(root / m.target))
        if m.after == "":  # a format-1 journal: nothing to compare with
            return []
        if m.target not in expected or made:
            expected[m.target] = m.after if made else m.before
    return [t for t, want in expected.items() if _fingerprint(root / t) != want]


def _discard_stale_journal(staging: Path, root: Path, moves: list[_Move], changed: list[str]) -> None:
    """The files changed after the interruption. Replaying the journal over them would mix two packages;
    the journal is dropped and the files are left as found, unless the barrier stub is still in place
    (then the package is half-changed and only a reinstall can tell what it should be)."""
    listing = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    barrier = moves[0].target if moves and moves[0].staged is not None else None
    stub_in_place = barrier is not None and _fingerprint(root / barrier) == moves[0].after
    if stub_in_place:
        raise JournalError(
            f"a torch-overlay command was interrupted after its commit point, and files it was replacing have "
            f"changed since ({listing})", unchanged="nothing was changed; 'import torch' refuses to run",
            todo=f"reinstall the package (pip install --force-reinstall --no-deps), then remove {staging}")
    _remove_probes(staging)
    shutil.rmtree(staging)
    error = JournalDiscarded(
        f"the journal of an interrupted torch-overlay command no longer matches the files ({listing} changed "
        "since, e.g. by a pip reinstall); it was discarded, not replayed",
        unchanged="the files were left as found",
        todo="run 'torch-overlay status' to see what is installed now, then 'torch-overlay apply' to patch it")
    error.root = root
    error.created = tuple((m.target, m.after) for m in moves if m.staged is not None and not m.existed and m.after)
    error.deleted = tuple((m.target, m.before) for m in moves if m.staged is None and m.before)
    raise error


def remove_by_rename(staging_parent: Path, path: Path) -> None:
    """Remove the folder ``path`` in one step as a reader sees it: it is renamed into a staging folder marked
    as finished, then deleted; a kill on the way leaves only that staging folder, which :func:`recover`
    removes without a word."""
    staging = staging_parent / STAGING_NAME
    staging.mkdir()
    write_file_durably(staging / DONE_NAME, b"")
    os.replace(path, staging / "removed")
    _fsync(staging_parent)
    shutil.rmtree(staging)


def recover(staging_parent: Path) -> str | None:
    """Finish, or undo, a transaction a crash left behind.

    Returns a sentence for the user when there was something to do; raises
    :class:`JournalError` when the pending transaction can be neither
    finished nor undone by this process (no write access, unreadable journal)."""
    staging = staging_parent / STAGING_NAME
    if not os.path.lexists(staging):
        return None
    if staging.is_symlink() or not staging.is_dir():
        raise JournalError(f"{staging} is in the way: torch-overlay keeps its staging folder there, and this is "
                           "not a folder", unchanged="nothing was changed",
                           todo=f"remove it ('rm {staging}'), then run the command again")
    if not os.access(staging, os.W_OK | os.X_OK) or not os.access(staging_parent, os.W_OK | os.X_OK):
        committed = (staging / JOURNAL_NAME).exists()
        raise JournalError(
            f"a torch-overlay command was interrupted {'after' if committed else 'before'} its commit point, "
            f"and this user cannot write to {staging_parent} to "
            f"{'finish' if committed else 'clean up after'} it",
            unchanged="nothing was changed" + ("; until it is finished, 'import torch' refuses to run rather "
                                               "than use a half-changed torch" if committed else ""),
            todo="run any torch-overlay command (e.g. 'torch-overlay status') as the user that owns this "
                 "environment")
    if not (staging / JOURNAL_NAME).exists():
        finished = (staging / DONE_NAME).exists()
        _remove_probes(staging)
        shutil.rmtree(staging)
        return None if finished else \
            "rolled back a torch-overlay command that was interrupted before its commit point (nothing had changed)"
    root, moves = _read_journal(staging)
    if (staging / ROLLBACK_NAME).exists():
        _undo(staging, root, moves, None, "interrupted while undoing")
        return "undid a torch-overlay command that failed half-way and was interrupted while undoing it"
    changed = _unexpected_targets(staging, root, moves)
    if changed:
        _discard_stale_journal(staging, root, moves, changed)
    _run(staging, root, moves)
    for warning in _finish(staging, root, moves):
        warn(warning)
    return "finished a torch-overlay command that was interrupted after its commit point"
