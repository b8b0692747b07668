"""What a compiled call inside an eager annotate costs (patch local-dynamo-ambient-annotation),
vanilla vs patched torch with torch._dynamo.config.trace_under_caller_annotation off (the
default) and on, side by side in one run:
- the guards Dynamo installs for a compiled one-op function (names);
- µs per call of that function and µs per evaluation of its guards alone;
- the graphs one frame compiles under 12 different caller annotations and under 3 holding a
  fresh object each (patched off and on, upstream 2.13 where .venv-oracle exists).

usage: .venv/bin/python bench/bench_caller_annotation.py [--pairs N]
The vanilla side is a scratch venv whose torch is .venv's with the overlay reverted (the
release's files, checked against the wheel's RECORD); on it "off" and "on" are the same
compile. Flag off and on are timed alternately in one process (caller_annotation_case.py);
vanilla and patched alternate as processes, N each; figures are medians over the processes.
Target: flag off installs exactly vanilla's guards, so it adds nothing per call.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test"))
sys.path.insert(0, str(HERE.parent / "test" / "overlay"))
from oracle_interpreter import ORACLE_PYTHON  # noqa: E402
from scratch_torch import VENV, ScratchTorch  # noqa: E402

CASE = HERE / "caller_annotation_case.py"


def run(python, what):
    out = subprocess.run([str(python), str(CASE), what], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"vanilla": ScratchTorch(Path(tmp) / "vanilla").python, "patched": VENV / "bin" / "python"}
        guards = {name: run(python, "guards")["guards"] for name, python in sides.items()}
        samples = {name: [] for name in sides}
        for i in range(args.pairs):
            for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                samples[name].append(run(sides[name], "overhead")["overhead"])

    print("guards of a compiled one-op function (no annotation active)")
    extra = lambda names: sorted(set(names) - set(guards["vanilla"]["off"])) or "none"  # noqa: E731
    print(f"  vanilla: {', '.join(guards['vanilla']['off'])}")
    print(f"  patched, flag off: same as vanilla: {guards['patched']['off'] == guards['vanilla']['off']}")
    print(f"  patched, flag on: added {extra(guards['patched']['on'])}")
    print()
    print(f"µs, median of {args.pairs} processes per side")
    print(f"{'side':8} {'call off':>9} {'call on':>9} {'call on, inside annotate':>25} {'guards off':>11} {'guards on':>10}")
    for name, runs in samples.items():
        med = lambda group, key: statistics.median(r[group][key] for r in runs) if key in runs[0][group] else None  # noqa: E731
        inside = med("call", "on inside annotate")
        print(f"{name:8} {med('call', 'off'):9.2f} {med('call', 'on'):9.2f} "
              f"{(f'{inside:.2f}' if inside is not None else '-'):>25} "
              f"{med('guard_check', 'off'):11.3f} {med('guard_check', 'on'):10.3f}")
    print()
    print("graphs compiled by one frame called under changing caller annotations")
    rows = {"patched": run(sides["patched"], "compiles")["compiles"]}
    if ORACLE_PYTHON.exists():
        upstream = run(ORACLE_PYTHON, "compiles")
        rows["upstream " + upstream["torch"]] = upstream["compiles"]
    for name, counts in rows.items():
        print(f"  {name}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))


if __name__ == "__main__":
    sys.exit(main())
