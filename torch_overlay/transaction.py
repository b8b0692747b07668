"""All-or-nothing replacement of several files in an installed package.

A transaction first writes every new file into a staging folder on the same
filesystem, then writes ``journal.json`` listing the moves (the commit point),
then moves the files into place and finally deletes the staging folder.  A
crash (even ``kill -9``) before the journal exists leaves the installation
untouched; a crash after it is finished by replaying the journal.  Every
command runs :func:`recover` first, under the same lock, so the next command
always finds the installation either fully before or fully after.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .errors import OverlayError

STAGING_NAME = "overlay-txn"
JOURNAL_NAME = "journal.json"
FAILPOINT_ENV = "TORCH_OVERLAY_FAILPOINT"


def failpoint(name: str) -> None:
    """Test hook: ``TORCH_OVERLAY_FAILPOINT=<name>`` kills this process with
    SIGKILL at that point; ``<name>:sleep`` announces itself on stderr and
    sleeps, so a test can act while the command is mid-way."""
    wanted = os.environ.get(FAILPOINT_ENV, "")
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if wanted == f"{name}:sleep":
        print(f"failpoint {name} reached", file=sys.stderr, flush=True)
        time.sleep(600)


def _fsync_dir(path: Path) -> None:
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


class Transaction:
    """Stage writes and deletions under ``root``; :meth:`commit` makes them real."""

    def __init__(self, root: Path, staging_parent: Path):
        self.root = root
        self.staging = staging_parent / STAGING_NAME
        self.moves: list[tuple[str, str | None]] = []  # (target relative to root, staged name or None = delete)

    def write(self, relpath: str, data: bytes) -> None:
        self.staging.mkdir(exist_ok=True)
        name = str(len(self.moves))
        write_file_durably(self.staging / name, data)
        self.moves.append((relpath, name))

    def delete(self, relpath: str) -> None:
        """Remove a file or a whole folder (relative to root)."""
        self.moves.append((relpath, None))

    def commit(self) -> None:
        self.staging.mkdir(exist_ok=True)
        failpoint("staged")
        journal = {"root": str(self.root), "moves": self.moves}
        tmp = self.staging / (JOURNAL_NAME + ".tmp")
        write_file_durably(tmp, json.dumps(journal).encode())
        os.replace(tmp, self.staging / JOURNAL_NAME)
        _fsync_dir(self.staging)
        failpoint("journal")
        _replay(self.staging, journal)


def _replay(staging: Path, journal: dict) -> None:
    root = Path(journal["root"])
    touched_dirs = set()
    for i, (relpath, staged) in enumerate(journal["moves"]):
        target = root / relpath
        if staged is None:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        else:
            src = staging / staged
            if src.exists():  # absent: moved already by an interrupted replay
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, target)
        touched_dirs.add(target.parent)
        failpoint(f"move:{i}")
    for d in touched_dirs:
        if d.exists():
            _fsync_dir(d)
    failpoint("moved")
    shutil.rmtree(staging)


def recover(staging_parent: Path) -> str | None:
    """Finish or roll back a transaction a crash left behind.

    Returns a sentence for the user when there was something to do."""
    staging = staging_parent / STAGING_NAME
    if not staging.exists():
        return None
    journal_path = staging / JOURNAL_NAME
    if journal_path.exists():
        _replay(staging, json.loads(journal_path.read_text()))
        return "finished a torch-overlay command that was interrupted after its commit point"
    shutil.rmtree(staging)
    return "rolled back a torch-overlay command that was interrupted before it changed anything"
