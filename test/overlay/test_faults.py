"""kill -9 at every failpoint and at every file move of apply and revert (rebuild-wheel:
test_rebuild_wheel_faults.py).

After each kill the scratch torch is checked from outside the tool (hashes of every target,
torch/__init__.py and the dist-info folder, RECORD included) and through ``import torch`` in a
fresh process: import must be refused while the files are mixed, and must give the torch the
files say when they are not.  Then ``status`` must leave exactly the pristine or the patched
state, with valid bytecode and no stray file.  The number of moves is read from the journal of
a real run, so every move is covered whatever the series holds.
"""
from __future__ import annotations

import json
import signal

import pytest

from fault_checks import Saved, classify, import_probe, snapshot, stale_bytecode, stray_files
from scratch_torch import ScratchTorch

BEFORE_COMMIT = ["staged", "probe", "probed"]  # a kill here leaves the state the command started from
AFTER_COMMIT = ["journal"]     # from the journal on, recovery finishes the command
AFTER_MOVES = ["moved", "done"]  # every move made, the clean-up not yet


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A scratch torch with its pristine and patched states captured and saved."""
    root = tmp_path_factory.mktemp("faults")
    scratch = ScratchTorch(root / "scratch")
    pristine, saved_pristine = snapshot(scratch), Saved(scratch, root / "saved-pristine")
    scratch.run("apply", check=True)
    patched, saved_patched = snapshot(scratch), Saved(scratch, root / "saved-patched")
    return scratch, pristine, patched, saved_pristine, saved_patched


def move_count(scratch: ScratchTorch, command: str) -> int:
    """Moves in the journal of a real run of ``command`` (killed right after its commit point)."""
    proc = scratch.run(command, env={"TORCH_OVERLAY_FAILPOINT": "journal"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    journal = json.loads((scratch.dist_info / "overlay-txn" / "journal.json").read_text())
    scratch.run("status", check=True)
    return len(journal["moves"])


def kill_at_every_point(lab, command: str, start, before_commit: list[str], after_commit: list[str]) -> list[str]:
    """Failures seen when ``command`` is killed at each point; the first state is where it starts."""
    scratch, pristine, patched, saved_pristine, saved_patched = lab
    states = {"pristine": pristine, "patched": patched}
    begin, end = ("pristine", "patched") if command == "apply" else ("patched", "pristine")
    failures = []
    for point in before_commit + after_commit:
        expected = begin if point in before_commit else end
        start.restore()
        proc = scratch.run(command, env={"TORCH_OVERLAY_FAILPOINT": point})
        if proc.returncode != -signal.SIGKILL:
            failures.append(f"{point}: not reached (exit {proc.returncode}: {proc.stderr.strip()[-300:]})")
            continue
        on_disk = classify(snapshot(scratch), pristine, patched)
        seen = import_probe(scratch)
        if seen != ("refused" if on_disk == "mixed" else on_disk):
            failures.append(f"{point}: files {on_disk}, import torch gives {seen}")
        status = scratch.run("status")
        now = snapshot(scratch)
        after = classify(now, pristine, patched)
        if status.returncode != 0 or "Traceback" in status.stderr:
            failures.append(f"{point}: status failed: {status.stderr.strip()[-300:]}")
        elif after == "mixed":
            failures.append(f"{point}: still mixed after recovery")
        else:
            if stray := stray_files(now, states[after]):
                failures.append(f"{point}: stray files after recovery: {stray}")
            if stale := stale_bytecode(scratch):
                failures.append(f"{point}: bytecode not valid for its source: {stale}")
            if after != expected:
                failures.append(f"{point}: recovery made it {after}, not {expected}")
    return failures


def test_kill_9_at_every_point_of_apply(lab):
    scratch, *_, saved_pristine, _ = lab
    saved_pristine.restore()
    n = move_count(scratch, "apply")
    moves = [f"move:{i}" for i in range(n)]
    assert not kill_at_every_point(lab, "apply", saved_pristine, BEFORE_COMMIT,
                                   [*AFTER_COMMIT, *moves, *AFTER_MOVES])


def test_kill_9_at_every_point_of_revert(lab):
    scratch, *_, saved_patched = lab
    saved_patched.restore()
    n = move_count(scratch, "revert")
    moves = [f"move:{i}" for i in range(n)]
    assert not kill_at_every_point(lab, "revert", saved_patched, BEFORE_COMMIT,
                                   [*AFTER_COMMIT, *moves, *AFTER_MOVES])


def test_failed_move_is_undone_even_when_the_undo_is_killed(lab):
    """A move that fails (here: ENOSPC injected at move 5) undoes the moves made; a kill during the
    undo leaves a journal marked for undoing, and the next command finishes the undo."""
    scratch, pristine, patched, saved_pristine, _ = lab
    saved_pristine.restore()
    proc = scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:5:enospc"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "nothing was changed: the files already replaced were put back" in proc.stderr
    assert classify(snapshot(scratch), pristine, patched) == "pristine"
    assert not stray_files(snapshot(scratch), pristine)
    for point in ("rollback:3", "rollback:0"):
        saved_pristine.restore()
        proc = scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": f"move:5:enospc,{point}"})
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        on_disk = classify(snapshot(scratch), pristine, patched)  # at rollback:0 every move is undone
        assert import_probe(scratch) == ("refused" if on_disk == "mixed" else on_disk)
        out = scratch.run("status", check=True).stdout
        assert "undid a torch-overlay command" in out
        now = snapshot(scratch)
        assert classify(now, pristine, patched) == "pristine" and not stray_files(now, pristine)
