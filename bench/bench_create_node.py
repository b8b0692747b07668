"""TracerBase.create_node, the tracing hot path: patched vs vanilla 2.5.1, side by side.

usage: .venv/bin/python bench/bench_create_node.py [--pairs N]
The vanilla side is a scratch venv whose torch is .venv's with the overlay
reverted (the release's files, checked against the wheel's RECORD). Each figure
is the best of 5 x 20,000 create_node calls in a fresh process, median over the
alternating pairs, for four tracing states: no metadata, a flat annotation, a
nested one, and a backward node (grad_fn seq_nr, stack trace, autograd_backward).
Target: the overlay adds at most 1 µs per node in every state.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test" / "overlay"))
from scratch_torch import VENV, ScratchTorch  # noqa: E402

STATES = ["bare", "flat", "nested", "backward"]
TARGET_US = 1.0


def measure(python, state):
    out = subprocess.run([str(python), str(HERE / "create_node_case.py"), state],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["us_per_node"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"vanilla": ScratchTorch(Path(tmp) / "vanilla").python, "patched": VENV / "bin" / "python"}
        print(f"{'state':10} {'vanilla_us':>10} {'patched_us':>10} {'delta_us':>9}  target")
        for state in STATES:
            samples = {name: [] for name in sides}
            for i in range(args.pairs):
                for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                    samples[name].append(measure(sides[name], state))
            van, pat = (statistics.median(samples[n]) for n in ("vanilla", "patched"))
            delta = pat - van
            print(f"{state:10} {van:10.2f} {pat:10.2f} {delta:9.2f}  +{TARGET_US} "
                  f"{'ok' if delta <= TARGET_US else 'MISSED'}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
