"""What annotate's copy rule costs: patched 2.5.1 vs upstream 2.13, side by side.

usage: .venv/bin/python bench/bench_annotation_copy.py [--repeat N]
Each case traces 100 ops inside annotate(<annotation>), with make_fx (forward
only) and with aot_function (joint graph, backward nodes and the forward→backward
copy included). Every measurement is a fresh process; ours and upstream's runs
alternate. Prints median time and peak traced Python allocation per side and
their ratio. Target (issue: copy semantics): ours/upstream <= 1.1 everywhere.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CASES = ["big-list/make_fx", "big-list/joint", "many-list-keys/make_fx", "many-list-keys/joint",
         "flat/make_fx", "flat/joint"]
TARGET = 1.1
TIMEOUT_S = 120  # a side slower than this is reported as "> TIMEOUT_S" (upstream's joint big-list
                 # case deep-copies the list once per backward node: ~330 s, longer under tracemalloc)


def measure(python, case, what):
    try:
        out = subprocess.run([str(python), str(HERE / "annotation_copy_case.py"), case, what],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return float("inf")
    if out.returncode:
        return None  # a side that fails is reported as such
    return json.loads(out.stdout.strip().splitlines()[-1])["value"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    args = ap.parse_args()
    sides = {"ours": REPO / ".venv" / "bin" / "python", "upstream": REPO / ".venv-oracle" / "bin" / "python"}
    for name, python in sides.items():
        if not python.exists():
            raise SystemExit(f"{python} is missing: run scripts/test.sh once")
    print(f"{'case':24} {'metric':8} {'ours':>10} {'upstream':>10} {'ratio':>6}  target")
    for case in args.cases:
        for what, unit in (("time", "s"), ("memory", "B")):
            samples = {name: [] for name in sides}
            for i in range(args.repeat if what == "time" else 1):
                order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                for name in order:
                    samples[name].append(measure(sides[name], case, what))
            med = {name: None if None in v else statistics.median(v) for name, v in samples.items()}
            if None in med.values():
                failed = [n for n, v in med.items() if v is None]
                print(f"{case:24} {what:8} {'failed: ' + ', '.join(failed)}")
                continue
            ratio = med["ours"] / med["upstream"]
            verdict = "ok" if ratio <= TARGET else "MISSED"
            shown = {n: f">{TIMEOUT_S}s" if v == float("inf") else f"{v:.4g}" for n, v in med.items()}
            print(f"{case:24} {what + '_' + unit:8} {shown['ours']:>10} {shown['upstream']:>10} {ratio:6.3f}  "
                  f"{TARGET} {verdict}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
