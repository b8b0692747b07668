"""What torch._inductor.config.kernel_annotations costs: compile time and step time of the annotated
transformer (bench/transformer_workload.py, Inductor, SDPA attention) on the vanilla release, on the patched
release with the option off (the default) and with it on, side by side.

usage: .venv/bin/python bench/kernel_annotations_cost.py [--layers N ...] [--pairs N]
Every measurement is a fresh process (bench_compile.run: one thread, its own Inductor cache, FX graph and
AOTAutograd caches off, so every run compiles); the sides take turns, in an order rotated every round, and only
ratios measured in this one run are printed. The vanilla release has no annotate, so its side compiles the model
without annotations (transformer_workload.py's null context): off / vanilla is the whole series' cost of compiling
an annotated model, whose target is bench_compile.py's (compile <= 1.02), and the step's (<= 1.01: the option off
writes nothing, so the output code is the release's). What the option itself costs when off is not a time this
machine resolves: count it with `bench/compile_calls.py --backend inductor --attention sdpa` (the option's
functions in its list of calls only the patched side makes). on / off is the option's own cost when on: the
comments and scopes at compile time, one record_function per kernel and extern call at run time.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "test" / "overlay"))
from bench_compile import run  # noqa: E402
from scratch_torch import VENV, ScratchTorch  # noqa: E402

# bench_compile.py's targets for the annotated model (see the docstring)
TARGETS = {("off", "compile_cpu_s"): 1.02, ("off", "step_s"): 1.01}


def measure(python, layers, cache, option_on):
    os.environ["TORCHINDUCTOR_KERNEL_ANNOTATIONS"] = "1" if option_on else "0"
    try:
        return run(python, "inductor", "sdpa", layers, cache)
    finally:
        os.environ.pop("TORCHINDUCTOR_KERNEL_ANNOTATIONS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[12])
    ap.add_argument("--pairs", type=int, default=2, help="rounds of the three sides")
    a = ap.parse_args()
    status = subprocess.run([str(VENV / "bin" / "torch-overlay"), "status"], capture_output=True, text=True).stdout
    if "local-inductor-kernel-annotations" not in status:
        raise SystemExit(".venv's torch has no local-inductor-kernel-annotations: run scripts/setup.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        vanilla = ScratchTorch(Path(tmp) / "vanilla").python
        sides = {"vanilla": (vanilla, False), "off": (VENV / "bin" / "python", False),
                 "on": (VENV / "bin" / "python", True)}
        print(f"{'layers':>6} {'metric':<14} {'vanilla':>9} {'off':>9} {'on':>9} {'off/van':>8} {'on/off':>7}")
        for layers in a.layers:
            caches = {name: str(Path(tmp) / f"cache-{name}-{layers}") for name in sides}
            for name, (py, on) in sides.items():  # warm-up: fills each side's C++ kernel cache, discarded
                measure(py, layers, caches[name], on)
            results = {name: [] for name in sides}
            order = list(sides)
            for i in range(a.pairs):
                for name in order[i % 3:] + order[:i % 3]:
                    py, on = sides[name]
                    results[name].append(measure(py, layers, caches[name], on))
            for metric in ("compile_s", "compile_cpu_s", "step_s"):
                v, off, on = (statistics.median(r[metric] for r in results[n]) for n in sides)
                target = TARGETS.get(("off", metric))
                verdict = "" if target is None else ("ok" if off / v <= target else "MISSED")
                print(f"{layers:>6} {metric:<14} {v:>9.4g} {off:>9.4g} {on:>9.4g} {off / v:>8.3f} {on / off:>7.3f}"
                      f" {verdict}")


if __name__ == "__main__":
    main()
