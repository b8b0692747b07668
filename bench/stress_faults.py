"""kill -9 at random moments of apply and revert on a scratch copy of .venv's torch, then recover.

usage: .venv/bin/python bench/stress_faults.py [--trials N] [--seed S]

Each trial starts a command (apply from the pristine state or revert from the patched one),
kills it after a random delay spread over the command's whole run (every third one: a random
delay after the commit point announces itself, aimed at the moves), and looks at the files from
outside the tool (see test/overlay/fault_checks.py): pristine, patched or mixed.  A mixed state
is then imported in a fresh process, which must refuse.  Then ``status`` recovers, and the state
must be pristine or patched again, with valid bytecode and no stray file.  The shared .venv is
never touched.  Goal: 0 mixed states visible to import, 0 recovery failures, 0 stray files.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "overlay"))
from fault_checks import Saved, classify, import_probe, snapshot, stale_bytecode, stray_files  # noqa: E402
from scratch_torch import ScratchTorch  # noqa: E402
from torch_overlay.transaction import FAILPOINT_ENV  # noqa: E402



def run_time(cmd) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def moves_duration(cmd) -> float:
    """Seconds from the commit point to the last rename, as announced by the failpoints."""
    env = {**os.environ, FAILPOINT_ENV: "journal:announce,renamed:announce"}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    proc.stderr.readline()
    t = time.perf_counter()
    proc.stderr.readline()
    elapsed = time.perf_counter() - t
    proc.wait()
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = ScratchTorch(Path(tmp) / "scratch")
        tool = [str(scratch.python), "-m", "torch_overlay"]
        pristine, saved_pristine = snapshot(scratch), Saved(scratch, Path(tmp) / "pristine")
        durations = {"apply": [], "revert": []}
        moves = {"apply": [], "revert": []}
        for _ in range(3):
            durations["apply"].append(run_time(tool + ["apply"]))
            durations["revert"].append(run_time(tool + ["revert"]))
        for _ in range(3):
            moves["apply"].append(moves_duration(tool + ["apply"]))
            moves["revert"].append(moves_duration(tool + ["revert"]))
        window = {c: 1.5 * max(ts) for c, ts in moves.items()}  # aimed kills: up to 1.5 x the longest moves
        scratch.run("apply", check=True)
        patched, saved_patched = snapshot(scratch), Saved(scratch, Path(tmp) / "patched")
        start = {"apply": saved_pristine, "revert": saved_patched}
        states = {"pristine": pristine, "patched": patched}
        longest = {c: max(ts) for c, ts in durations.items()}

        count = Counter()
        problems = []
        for trial in range(args.trials):
            command = "apply" if trial % 2 == 0 else "revert"
            start[command].restore()
            aimed = trial % 3 == 2
            delay = rng.uniform(0, window[command] if aimed else longest[command])
            env = {**os.environ, FAILPOINT_ENV: "journal:announce"} if aimed else None
            proc = subprocess.Popen(tool + [command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    env=env)
            if aimed:  # the moves start right after the commit point announces itself
                proc.stderr.readline()
            time.sleep(delay)
            proc.kill()
            _, err = proc.communicate()
            count["trials"] += 1
            if proc.returncode != -9:
                count["finished before the kill"] += 1
            if "Traceback" in err:
                count["tracebacks"] += 1
            on_disk = classify(snapshot(scratch), pristine, patched)
            count[f"killed: {on_disk}"] += 1
            if on_disk == "mixed":
                seen = import_probe(scratch)
                count[f"mixed, import {'refused' if seen == 'refused' else 'ran'}"] += 1
                if seen != "refused":
                    count["mixed visible to import"] += 1
                    problems.append(f"trial {trial} ({command}, {delay:.3f} s): mixed files, import gave {seen}")
            status = scratch.run("status")
            if "Traceback" in status.stderr:
                count["tracebacks"] += 1
            now = snapshot(scratch)
            after = classify(now, pristine, patched)
            count[f"recovered: {after}"] += 1
            if status.returncode != 0 or after == "mixed" or stale_bytecode(scratch):
                count["recovery failures"] += 1
                problems.append(f"trial {trial} ({command}, {delay:.3f} s): status exit {status.returncode}, "
                                f"{after}, stale bytecode {stale_bytecode(scratch)}: {status.stderr.strip()[-200:]}")
            elif strays := stray_files(now, states[after]):
                count["stray files"] += len(strays)
                problems.append(f"trial {trial} ({command}): stray files {strays}")

    print(f"apply {statistics.median(durations['apply']):.2f} s, revert {statistics.median(durations['revert']):.2f} s "
          f"(median of 3 uninterrupted runs); moves {statistics.median(moves['apply']) * 1000:.0f} ms / "
          f"{statistics.median(moves['revert']) * 1000:.0f} ms; kills at uniform random delays up to the longest "
          "run from the start, every third one up to 1.5 x the longest moves after the commit point")
    for key in ["trials", "finished before the kill", "killed: pristine", "killed: patched", "killed: mixed",
                "mixed, import refused", "mixed visible to import", "recovered: pristine", "recovered: patched",
                "recovery failures", "stray files", "tracebacks"]:
        print(f"{key:<28} {count[key]}")
    for p in problems:
        print("  " + p)
    return 1 if problems or count["tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
