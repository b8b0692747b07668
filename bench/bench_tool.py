"""Wall time of torch-overlay apply / revert / status / rebuild-wheel on real torch 2.5.1 files.

usage: .venv/bin/python bench/bench_tool.py [--repeat N]
Runs in a scratch copy of .venv's torch (see test/overlay/scratch_torch.py), so
the shared .venv is never touched. Each command is a fresh process, as a user
runs it; the median of N runs is printed with the interpreter start-up measured
alongside (``python -c pass``), so the tool's own cost can be read off.
rebuild-wheel rewrites the real 2.5.1 wheel (build/wheels, ~900 MB) into a
temporary folder. Targets: apply <= 5 s, rebuild-wheel <= 90 s.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "overlay"))
from scratch_torch import ScratchTorch, torch_wheel  # noqa: E402

TARGETS = {"apply": 5.0, "rebuild-wheel": 90.0}


def timed(cmd) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    n = ap.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        scratch = ScratchTorch(Path(tmp))
        tool = [str(scratch.python), "-m", "torch_overlay"]
        runs = {"python -c pass": [], "status": [], "apply": [], "apply (no-op)": [], "revert": [],
                "rebuild-wheel": []}
        wheel = torch_wheel()
        for i in range(n):
            runs["python -c pass"].append(timed([str(scratch.python), "-c", "pass"]))
            runs["status"].append(timed(tool + ["status"]))
            runs["apply"].append(timed(tool + ["apply"]))
            runs["apply (no-op)"].append(timed(tool + ["apply"]))
            runs["revert"].append(timed(tool + ["revert"]))
            runs["rebuild-wheel"].append(timed(tool + ["rebuild-wheel", str(wheel), "-o", f"{tmp}/wheels-{i}"]))
            shutil.rmtree(f"{tmp}/wheels-{i}")
    print(f"{'command':<16} {'median s':>9} {'max s':>7}   (n={n})")
    for name, ts in runs.items():
        print(f"{name:<16} {statistics.median(ts):>9.3f} {max(ts):>7.3f}")
    for name, target in TARGETS.items():
        median = statistics.median(runs[name])
        print(f"{name} target {target:g} s: {'met' if median <= target else 'MISSED'} ({median:.2f} s)")


if __name__ == "__main__":
    main()
