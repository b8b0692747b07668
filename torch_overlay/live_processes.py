"""Processes that have a torch installation loaded (Linux: their memory maps name its shared libraries).

A process that has imported torch keeps importing torch's submodules from disk as it runs: replacing the files
under it gives it a mix of pristine and patched modules (an AttributeError at best, silently wrong graphs at
worst), and no stub ``torch/__init__.py`` can stop an import that already happened."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import OverlayError, warn


@dataclass(frozen=True)
class LiveProcess:
    pid: int
    command: str


def processes_using(torch_dir: Path, proc: Path = Path("/proc")) -> list[LiveProcess]:
    """The other processes that map a file under ``torch_dir`` (its ``lib/*.so``); those whose maps this user
    may not read are not seen."""
    prefix = str(torch_dir) + os.sep
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(entry / "maps", encoding="utf-8", errors="replace") as maps:
                if not any(prefix in line for line in maps):
                    continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or another user's
            continue
        found.append(LiveProcess(int(entry.name), command or "?"))
    return found


def refuse_while_loaded(torch_dir: Path, command: str, force: bool, warned: frozenset = frozenset(),
                        late: bool = False) -> frozenset:
    """Refuse ``command`` while another process has this torch loaded; with ``force``, warn and go on (about
    the processes not in ``warned`` only). ``late``: the look once the import barrier is in place, which
    says the process loaded torch while the command was preparing. Returns the PIDs seen."""
    live = processes_using(torch_dir)
    seen = frozenset(p.pid for p in live)
    if force:
        live = [p for p in live if p.pid not in warned]
    if not live:
        return seen
    listing = "; ".join(f"PID {p.pid}: {p.command[:200]}" for p in live)
    if force:
        warn(f"{command} goes on (--force) while these processes have this torch loaded; they may see a mix of "
             f"old and new modules until they restart: {listing}")
        return seen
    when = f" (loaded while {command} was preparing its files; it stopped before replacing any)" if late else ""
    raise OverlayError(f"{len(live)} running process(es) have this torch loaded and would see a mix of old and new "
                       f"modules: {listing}{when}", unchanged="nothing was changed",
                       todo=f"stop them and run '{command}' again, or pass --force to {command} anyway")


def guard_while_loaded(torch_dir: Path, command: str, force: bool) -> Callable[[], None]:
    """Refuse now (see :func:`refuse_while_loaded`), and return the look to take again once the import barrier
    is in place (``Barrier.check``): a process that imports torch between this look and the barrier would
    otherwise go on importing torch's modules from disk while they are replaced, and get a mix of the two."""
    warned = refuse_while_loaded(torch_dir, command, force)
    return lambda: refuse_while_loaded(torch_dir, command, force, warned, late=True)
