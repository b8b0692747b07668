"""The steps that change an installed torch, shared by apply / revert / status (inplace.py) and develop.

Each step is one transaction (transaction.py) under the caller's lock: :func:`install` puts new files (or, for
develop, links to a checkout) in place with the overlay state and RECORD, :func:`revert_files` puts the saved
originals and the release's RECORD back, :func:`recover_interrupted` finishes or undoes what a killed command
left. ``torch/__init__.py`` is the import barrier of every one of them. :func:`link_problems` checks the links
develop made, which status reports and develop's own state describes (``DEVELOP_KEY`` in ``applied.json``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import py_compile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from .errors import OverlayError, warn
from .installation import STATE_DIR, STATE_FILE, TorchInstallation
from .record import Record, record_hash
from .transaction import (STAGING_NAME, Barrier, JournalDiscarded, JournalError, Transaction, failpoint, recover,
                          remove_by_rename, remove_created_leftovers, remove_unlisted_deletions)

DEVELOP_KEY = "develop"  # in applied.json: where develop's links point (develop.develop_state writes it)

# Replaced by a stub while files move (see transaction.py): every import of torch runs it first.
BARRIER_PATH = "torch/__init__.py"
BARRIER_STUB = b"""\
# Put here by torch-overlay for the moment it replaces torch's files; the real file comes back last.
raise ImportError(
    "torch cannot be imported now: torch-overlay is replacing torch's files, or was interrupted while "
    "doing so, and a half-replaced torch would give wrong results. Run 'python -m torch_overlay status' "
    "with this Python to finish or undo the change, then import torch again."
)
"""
BARRIER_MARK = BARRIER_STUB.split(b"\n", 1)[0]  # how every stub starts, whatever the rest says


class BarrierLeft(OverlayError):
    """The import barrier with no transaction behind it: an interrupted command's staging folder (its journal,
    the kept originals) was deleted, so nothing says what torch's files should be; only a reinstall does."""


def _refuse_barrier_left(inst: TorchInstallation) -> None:
    init = inst.site / BARRIER_PATH
    try:
        with open(init, "rb") as f:
            head = f.read(len(BARRIER_MARK))
    except OSError:
        return
    if head == BARRIER_MARK:
        raise BarrierLeft(
            f"{init} is torch-overlay's import barrier, a stub that refuses 'import torch', left by an interrupted "
            f"torch-overlay command whose staging folder {inst.dist_info / STAGING_NAME} is gone (deleted after "
            "the interruption?): what torch's files should be can no longer be told",
            unchanged="nothing was changed", todo=f"reinstall torch: {inst.reinstall_command}")


def recover_interrupted(inst: TorchInstallation) -> str | None:
    """Finish or undo an interrupted transaction (under the lock), with torch's own remedy on failure; refuse an
    import barrier that no pending transaction explains."""
    try:
        done = recover(inst.dist_info)
        _refuse_barrier_left(inst)
        return done
    except JournalDiscarded as e:
        if inst.state_left_behind():  # the discarded apply had moved it in, and pip's reinstall kept it
            remove_by_rename(inst.dist_info, inst.state_dir)
            e.unchanged += (f", except the overlay state {inst.state_dir}, which the interrupted apply had moved "
                            "in and the reinstall left behind (it claimed a patch the files do not have): removed")
        created = remove_created_leftovers(e)  # files the series creates: no RECORD of the reinstall lists them
        if created:
            e.unchanged += (f", except {', '.join(created)}, which the interrupted apply had created and the "
                            "reinstall left behind: removed")
        unlisted = remove_unlisted_deletions(e, set(inst.record().entries()))
        if unlisted:
            e.unchanged += (f", except {', '.join(unlisted)}, which the interrupted revert was removing and the "
                            "reinstall (whose RECORD does not list them) left behind: removed")
        raise
    except JournalError as e:
        if "reinstall the package" in e.todo:
            e.todo = (f"reinstall torch: {inst.reinstall_command}, "
                      f"then remove {inst.dist_info / 'overlay-txn'}")
        raise


def state_files(header: dict, patched: dict[str, bytes], pristine: dict[str, bytes | None],
                record: Record) -> dict[str, bytes]:
    """The overlay state files (paths relative to the dist-info folder): ``overlay/applied.json`` (``header``
    plus, per file, the hashes of its pristine and new bytes and its RECORD line) and the saved originals
    beside it, from which revert puts the release back byte for byte."""
    state = {**header, "files": {}}
    files = {}
    for path, data in patched.items():
        old = pristine[path]
        state["files"][path] = {
            "pristine": record_hash(old) if old is not None else None,
            "patched": record_hash(data),
            "record_line": record.find(path),
        }
        if old is not None:
            files[f"{STATE_DIR}/pristine/{path}.orig"] = old
    files[f"{STATE_DIR}/{STATE_FILE}"] = json.dumps(state, indent=1, sort_keys=True).encode()
    return files


def _transaction(inst: TorchInstallation, barrier_check: Callable[[], None] | None) -> Transaction:
    return Transaction(inst.site, inst.dist_info, Barrier(BARRIER_PATH, BARRIER_STUB, barrier_check))


def _write_module(txn: Transaction, inst: TorchInstallation, path: str, data: bytes) -> None:
    """Stage ``data`` as ``path`` and, for a module, its bytecode, so that a kill can never leave a
    half-written .pyc (or py_compile's temporary file) in torch's __pycache__ folders."""
    _stage_module(txn, inst, path, lambda staged: staged.write_bytes(data))


def _link_module(txn: Transaction, inst: TorchInstallation, path: str, target: Path) -> None:
    """Stage a symbolic link to ``target`` as ``path`` (develop), with bytecode of what it shows now; the
    bytecode records the target's mtime, so Python compiles it again after an edit."""
    _stage_module(txn, inst, path, lambda staged: os.symlink(target, staged))


def _stage_module(txn: Transaction, inst: TorchInstallation, path: str, produce) -> None:
    staged = txn.write_with(path, produce)
    if not path.endswith(".py"):
        return
    target = inst.site / path

    def compile_to(cfile: Path) -> None:
        # The staged source keeps its mtime when renamed into place, so the .pyc stays valid.
        try:
            py_compile.compile(str(staged), cfile=str(cfile), dfile=str(target), doraise=True)
        except py_compile.PyCompileError as e:
            raise OverlayError(f"the new {path} does not compile: {e.msg}", unchanged="nothing was changed",
                               todo="fix the patch that changes it") from None

    txn.write_with(inst.relpath(Path(importlib.util.cache_from_source(str(target)))), compile_to)


def _commit(txn: Transaction) -> None:
    for warning in txn.commit():
        warn(warning)


def install(inst: TorchInstallation, header: dict, patched: dict[str, bytes],
            links: dict[str, Path] | None = None, barrier_check: Callable[[], None] | None = None) -> None:
    """Replace each file of ``patched`` by its new bytes, or, for a path in ``links``, by a symbolic link to
    that file (develop; ``patched`` then holds what the link shows now, and RECORD lists the path without a
    hash, since its bytes change with every edit), in one transaction with the overlay state.
    ``barrier_check`` runs once the import barrier is in place (see ``transaction.Barrier``)."""
    links = links or {}
    record = inst.record()
    pristine = {p: (inst.site / p).read_bytes() if (inst.site / p).exists() else None for p in patched}
    new_state = state_files(header, patched, pristine, record)
    dist = inst.relpath(inst.dist_info)
    txn = _transaction(inst, barrier_check)
    for path, data in patched.items():
        if path in links:
            _link_module(txn, inst, path, links[path])
            record.put_unhashed(path)
        else:
            _write_module(txn, inst, path, data)
            record.put(path, data)
    txn.write_tree(f"{dist}/{STATE_DIR}", {name[len(STATE_DIR) + 1:]: data for name, data in new_state.items()})
    for name, data in new_state.items():
        record.put(f"{dist}/{name}", data)
    txn.write(f"{dist}/RECORD", record.render().encode("utf-8"))
    _commit(txn)


def saved_original(inst: TorchInstallation, path: str, expected: str) -> bytes:
    """The release's bytes of ``path`` as apply saved them, checked against the hash ``applied.json`` holds."""
    todo = f"reinstall torch: {inst.reinstall_command}"
    try:
        data = inst.pristine_copy(path).read_bytes()
    except OSError as e:
        raise OverlayError(f"the saved original of {path}, {inst.pristine_copy(path)}, cannot be read: "
                           f"{e.strerror or e}", unchanged="nothing was changed", todo=todo) from None
    if record_hash(data) != expected:
        raise OverlayError(f"the saved original of {path} is damaged (hash mismatch)",
                           unchanged="nothing was changed", todo=todo)
    return data


def revert_files(inst: TorchInstallation, state: dict, barrier_check: Callable[[], None] | None = None) -> str:
    """Put back the saved original of every file ``state`` (``applied.json``) lists, remove those the series
    created, and put the release's RECORD back, in one transaction; what it did, in one sentence."""
    originals = {path: None if info["pristine"] is None else saved_original(inst, path, info["pristine"])
                 for path, info in state["files"].items()}
    record = inst.record()
    dist = inst.relpath(inst.dist_info)
    txn = _transaction(inst, barrier_check)
    for path, data in originals.items():
        if data is None:  # a file the series created
            txn.delete(path)
            if path.endswith(".py"):
                txn.delete(inst.relpath(Path(importlib.util.cache_from_source(str(inst.site / path)))))
        else:
            _write_module(txn, inst, path, data)
        record.replace(path, state["files"][path]["record_line"])
    for f in sorted(inst.state_dir.rglob("*")):
        if f.is_file():
            record.replace(inst.relpath(f), None)
    txn.write(f"{dist}/RECORD", record.render().encode("utf-8"))
    txn.delete(f"{dist}/{STATE_DIR}")
    failpoint("revert-staged")
    _commit(txn)
    restored = [p for p, data in originals.items() if data is not None]
    removed = [p for p, data in originals.items() if data is None]
    return (f"reverted {len(restored)} files to the torch {state['torch_version']} release: " + ", ".join(restored)
            + (f"; removed {len(removed)} the series had created: " + ", ".join(removed) if removed else ""))


@contextmanager
def told_after(reverted: str | None):
    """Commands whose second transaction follows a revert of their own (apply over an older series, develop over
    an applied overlay): a refusal after the revert says what the revert did instead of "nothing was changed"."""
    try:
        yield
    except OverlayError as e:
        if reverted:
            e.unchanged = (f"{e.unchanged} after this command's first step, which {reverted[0].lower()}"
                           f"{reverted[1:]} (torch is that release now, whole)")
        raise


def link_problems(inst: TorchInstallation, state: dict) -> dict[str, str]:
    """{path: what is wrong} for the links develop made that are no longer links to their checkout file."""
    out = {}
    for path, target in state[DEVELOP_KEY]["links"].items():
        f = inst.site / path
        if not f.is_symlink() or os.readlink(f) != target:
            out[path] = f"no longer the link to {target}"
        elif not f.exists():
            out[path] = f"links to {target}, which is gone"
    return out
