"""Python function calls of the compile and of the training steps: patched vs vanilla, counted, not timed.

usage: .venv/bin/python bench/compile_calls.py [--layers N] [--annotated] [--backend B --attention A]
Timing a 1 % target on a shared 2-core machine is noise-bound (bench_compile.py); call counts are not. Both
sides run bench/transformer_workload.py (aot_eager and flex_attention unless --backend / --attention say
otherwise; nothing annotated unless --annotated)
under cProfile in a fresh process: the vanilla side is a scratch venv whose torch is .venv's with the overlay
reverted (checked against the wheel's RECORD), so both import the same packages. Printed: total calls of the
compile and of the steps, their ratio, and the functions that run only on the patched side with their
cumulative time (a function's time includes what it calls), largest first.
"""
import argparse
import os
import pstats
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test" / "overlay"))
from scratch_torch import VENV, ScratchTorch  # noqa: E402


def profile(python, prefix, layers, annotated, backend, attention):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": f"{prefix}-inductor-cache"}
    cmd = [str(python), str(HERE / "transformer_workload.py"), "--backend", backend, "--attention", attention,
           "--layers", str(layers), "--steps", "10", "--profile", str(prefix)]
    cmd += [] if annotated else ["--no-annotate"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{cmd} failed:\n{out.stderr[-3000:]}")


def calls_by_function(path):
    """(file below site-packages, function name) -> [calls, cumulative seconds]; addresses in names dropped."""
    table = {}
    for (filename, _, name), (_, calls, _, cumulative, _) in pstats.Stats(str(path)).stats.items():
        key = (filename.split("site-packages/")[-1], re.sub(r" at 0x[0-9a-f]+", "", name))
        row = table.setdefault(key, [0, 0.0])
        row[0] += calls
        row[1] += cumulative
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--annotated", action="store_true", help="keep the model's annotate blocks on the patched side")
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--attention", choices=["flex", "sdpa"], default="flex")
    ap.add_argument("--top", type=int, default=12, help="how many patched-only functions to list")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"vanilla": ScratchTorch(Path(tmp) / "vanilla").python, "patched": VENV / "bin" / "python"}
        for name, python in sides.items():
            profile(python, Path(tmp) / name, a.layers, a.annotated and name == "patched", a.backend, a.attention)
        for phase in ("compile", "steps"):
            vanilla, patched = (calls_by_function(Path(tmp) / f"{name}.{phase}.prof") for name in sides)
            v, p = (sum(row[0] for row in table.values()) for table in (vanilla, patched))
            print(f"{phase:<8} calls vanilla {v:>10} patched {p:>10} ratio {p / v:.4f}")
            only = sorted(((row, key) for key, row in patched.items() if key not in vanilla and key[0] != "~"),
                          key=lambda r: -r[0][1])
            for (calls, cumulative), (filename, function) in only[:a.top]:
                print(f"    only patched: {calls:>7} calls {cumulative:>7.3f} s  {filename}:{function}")
    print(f"layers={a.layers} annotated={a.annotated} ({a.backend}, {a.attention}, 10 steps)")


if __name__ == "__main__":
    main()
