"""Compile time, step time and tracing memory: patched vs vanilla torch 2.5.1, side by side.

usage: .venv/bin/python bench/bench_compile.py [--pairs N] [--layers N] [--backend aot_eager|inductor]
       [--nothing-annotated] [--warm-compiles N]
The vanilla side is a real second environment: a scratch venv whose torch is
.venv's with the overlay reverted (the release's files, checked against the
wheel's RECORD). Every measurement is a fresh process; vanilla and patched runs
alternate (order flipped every pair) so drift of this noisy machine hits both
alike, and only ratios measured in this one run are printed.
Targets: compile patched/vanilla <= 1.02, step <= 1.01, tracing peak memory <= 1.02.
With --nothing-annotated both sides run the model with its annotate blocks replaced by null
contexts: what a program that never annotates pays for the patched torch. Targets there:
compile <= 1.01, step <= 1.01, memory <= 1.02.
compile_cpu_s is the compile in process CPU time (the workload runs one thread):
on a busy machine it leaves out the waits for a core that spoil compile_s. It still swings by 10-20 %
between processes here; --warm-compiles N adds warm_compile_cpu_s: every timed process compiles the
model N more times, and the row compares the least of all those compiles per side (see
transformer_workload.py), which resolves differences the medians of a few pairs cannot.

Two more memory rows say where the memory goes: the patched torch tracing the
same model with its annotate blocks replaced by null contexts (the cost of the
mechanism alone, against vanilla), and torch 2.13 (.venv-oracle, if set up)
tracing it with and without annotations (what upstream pays for the same
annotations: one "custom" dict per annotated node of every graph). 2.13 refuses
flex_attention's backward on CPU, so its rows use the SDPA variant of the model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "test" / "overlay"))
from scratch_torch import VENV, ScratchTorch  # noqa: E402

CONFIGS = [("aot_eager", "flex"), ("inductor", "sdpa")]
TARGETS = {"compile_s": 1.02, "compile_cpu_s": 1.02, "warm_compile_cpu_s": 1.02, "step_s": 1.01,
           "peak_trace_bytes": 1.02}
NOTHING_ANNOTATED_TARGETS = {**TARGETS, "compile_s": 1.01, "compile_cpu_s": 1.01, "warm_compile_cpu_s": 1.01}


def run(python, backend, attention, layers, cache_dir, memory=False, annotate=True, warm_compiles=0):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": cache_dir,
           "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    cmd = [str(python), str(HERE / "transformer_workload.py"), "--backend", backend,
           "--attention", attention, "--layers", str(layers)]
    cmd += (["--memory"] if memory else []) + ([] if annotate else ["--no-annotate"])
    cmd += ["--warm-compiles", str(warm_compiles)] if warm_compiles else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{cmd} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--backend", choices=[b for b, _ in CONFIGS], help="only this configuration")
    ap.add_argument("--nothing-annotated", action="store_true",
                    help="both sides run the model without annotate blocks (the cost to programs that never annotate)")
    ap.add_argument("--warm-compiles", type=int, default=0, metavar="N",
                    help="each timed process compiles N more times; adds the least warm compile CPU time per side")
    a = ap.parse_args()
    annotate = not a.nothing_annotated
    targets = NOTHING_ANNOTATED_TARGETS if a.nothing_annotated else TARGETS
    oracle = VENV.parent / ".venv-oracle" / "bin" / "python"
    status = subprocess.run([str(VENV / "bin" / "torch-overlay"), "status"], capture_output=True, text=True).stdout
    if "applied: none" in status:
        raise SystemExit(".venv's torch is not patched: run scripts/setup.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        vanilla = ScratchTorch(Path(tmp) / "vanilla")
        envs = {"vanilla": vanilla.python, "patched": VENV / "bin" / "python"}
        caches = {name: str(Path(tmp) / f"inductor-cache-{name}") for name in envs}
        print(f"{'config':<20} {'metric':<17} {'vanilla':>10} {'patched':>10} {'ratio':>7} {'target':>7}")
        for backend, attention in CONFIGS:
            if a.backend and backend != a.backend:
                continue
            for name, py in envs.items():  # warm-up: fills each side's kernel cache, discarded
                run(py, backend, attention, a.layers, caches[name], annotate=annotate)
            results = {name: [] for name in envs}
            for i in range(a.pairs):
                for name in (["vanilla", "patched"] if i % 2 == 0 else ["patched", "vanilla"]):
                    results[name].append(run(envs[name], backend, attention, a.layers, caches[name],
                                             annotate=annotate, warm_compiles=a.warm_compiles))
            memory = {name: run(py, backend, attention, a.layers, caches[name], memory=True, annotate=annotate)
                      for name, py in envs.items()}
            config = f"{backend}+{attention}"
            metrics = ["compile_s", "compile_cpu_s"] + (["warm_compile_cpu_s"] if a.warm_compiles else [])
            for metric in metrics + ["step_s", "peak_trace_bytes"]:
                if metric == "peak_trace_bytes":
                    v, p = memory["vanilla"][metric], memory["patched"][metric]
                elif metric == "warm_compile_cpu_s":
                    v = min(r[metric] for r in results["vanilla"])
                    p = min(r[metric] for r in results["patched"])
                else:
                    v = statistics.median(r[metric] for r in results["vanilla"])
                    p = statistics.median(r[metric] for r in results["patched"])
                ratio = p / v
                verdict = "ok" if ratio <= targets[metric] else "MISSED"
                print(f"{config:<20} {metric:<17} {v:>10.4g} {p:>10.4g} {ratio:>7.3f} {targets[metric]:>7} {verdict}")
            if a.nothing_annotated:
                continue  # the rows below compare annotated runs
            peak = "peak_trace_bytes"
            off = run(envs["patched"], backend, attention, a.layers, caches["patched"], memory=True, annotate=False)
            v, p = memory["vanilla"][peak], off[peak]
            verdict = "ok" if p / v <= TARGETS[peak] else "MISSED"
            print(f"{config:<20} {'  annotations off':<17} {v:>10.4g} {p:>10.4g} {p / v:>7.3f} {TARGETS[peak]:>7} {verdict}"
                  "   (patched torch, annotate blocks replaced by null contexts)")
            if oracle.exists():
                with tempfile.TemporaryDirectory() as cache:
                    up_off, up_on = (run(oracle, backend, "sdpa", a.layers, cache, memory=True, annotate=on)
                                     for on in (False, True))
                v, p = up_off[peak], up_on[peak]
                print(f"{config:<20} {'  torch ' + up_on['torch']:<17} {v:>10.4g} {p:>10.4g} {p / v:>7.3f} {'-':>7}"
                      "      (upstream, sdpa: annotations off -> on)")
        print(f"pairs={a.pairs} layers={a.layers} warm_compiles={a.warm_compiles} "
              f"nothing_annotated={a.nothing_annotated}; vanilla annotate present: "
              f"{results['vanilla'][0]['annotate']}, patched: {results['patched'][0]['annotate']}")


if __name__ == "__main__":
    main()
