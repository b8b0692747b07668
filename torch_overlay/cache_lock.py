"""A blocking lock between processes that fill the same download-once cache (release wheels, Debian's source).

Two processes may want the same missing cache entry at once: two parallel test workers (pytest-xdist), or a
test run beside ``torch-overlay workspace``. Whoever takes the lock first fills the cache; the others wait,
then find the finished entry. Without it the second process could read a wheel that pip is still writing.
The lock file stays beside the cache (an empty file; taking the lock needs no clean-up after a crash)."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


@contextlib.contextmanager
def cache_lock(lock_file: Path):
    """Hold an exclusive flock on ``lock_file`` (created if missing) for the ``with`` block, waiting for it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
