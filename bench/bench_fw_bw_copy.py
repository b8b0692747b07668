"""Forward->backward metadata copy alone: our copy_fwd_metadata_to_bw_nodes vs upstream 2.13's.

usage: .venv/bin/python bench/bench_fw_bw_copy.py [--sizes 1000,10000,100000] [--repeat N]
For each size, bench/fw_bw_copy_graph.py builds the same synthetic joint graph (one nested
GraphModule per 100 nodes, cross-subgraph pairs, gradient accumulations) in fresh processes
of .venv/bin/python (ours: torch 2.5.1 + the series) and .venv-oracle/bin/python (upstream
torch 2.13), two processes per side with the order alternating.  Each process times
torch._functorch._aot_autograd.utils.copy_fwd_metadata_to_bw_nodes(gm) only (median of N
runs, gc off as in timeit; the backward nodes' meta is restored before every run so each run
does the full copy) and then checks the result: every backward node that is not a gradient
accumulation holds its forward node's custom (and its own keys), accumulations are untouched.
"walk" is a bare loop reading node.meta over the same graph, the floor the fx version sets.
Targets: per-node time at the largest size <= 1.5x that at the smallest (linear scaling);
ours/upstream <= 1.0 (5% allowed for noise; the figure is printed).
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENVS = {"ours": ROOT / ".venv/bin/python", "upstream": ROOT / ".venv-oracle/bin/python"}
NODES_PER_SUBGRAPH = 100
ROUNDS = 2
LINEAR_TARGET, RATIO_TARGET, NOISE = 1.5, 1.0, 1.05


def check(gm, snapshot, graph_modules):
    """Problems in gm after a copy, judged from the backward nodes' meta before it."""
    first_fwd = {}
    for m in graph_modules(gm):
        for n in m.graph.nodes:
            if "seq_nr" in n.meta and n.meta.get("partitioner_tag") != "is_backward":
                first_fwd.setdefault(n.meta["seq_nr"], n)
    problems = []
    for n, before in snapshot:
        if before.get("is_gradient_acc"):
            if "fwd_nn_module_stack" in n.meta or n.meta.get("custom") != before.get("custom"):
                problems.append(f"{n.name}: gradient accumulation got forward metadata")
            continue
        fwd = first_fwd[before["seq_nr"]]
        want = {**(before.get("custom") or {}), **(fwd.meta.get("custom") or {})}
        if (n.meta.get("custom") or {}) != want:
            problems.append(f"{n.name}: custom {n.meta.get('custom')} != {want} (from {fwd.name})")
        elif n.meta.get("fwd_nn_module_stack") != fwd.meta["nn_module_stack"]:
            problems.append(f"{n.name}: fwd_nn_module_stack not copied from {fwd.name}")
    return problems


def child(size, repeat):
    import torch
    from torch._functorch._aot_autograd.utils import copy_fwd_metadata_to_bw_nodes

    sys.path.insert(0, str(HERE))
    from fw_bw_copy_graph import build_joint_graph, graph_digest, graph_modules

    gm = build_joint_graph(size, max(1, size // NODES_PER_SUBGRAPH), seed=0)
    nodes = [n for m in graph_modules(gm) for n in m.graph.nodes]
    snapshot = [(n, dict(n.meta)) for n in nodes if n.meta.get("partitioner_tag") == "is_backward"]

    def timed(fn):
        gc.collect()
        gc.disable()
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        gc.enable()
        return dt

    def walk():
        for m in gm.modules():
            if isinstance(m, torch.fx.GraphModule):
                for n in m.graph.nodes:
                    n.meta.get("seq_nr")

    copy_times, walk_times = [], []
    for _ in range(repeat):
        for n, before in snapshot:
            n.meta.clear()
            n.meta.update(before)
        copy_times.append(timed(lambda: copy_fwd_metadata_to_bw_nodes(gm)))
        walk_times.append(timed(walk))
    problems = check(gm, snapshot, graph_modules)
    print(json.dumps({
        "torch": torch.__version__, "digest": graph_digest(gm),
        "n_call": sum(n.op == "call_function" for n in nodes), "n_graphs": len(graph_modules(gm)),
        "copy_s": copy_times, "walk_s": walk_times, "problems": problems[:3], "n_problems": len(problems),
    }))


def run_child(python, size, repeat):
    cmd = [str(python), __file__, "--child", str(size), "--repeat", str(repeat)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.repeat)

    sizes = [int(s) for s in args.sizes.split(",")]
    rows, failed = [], False
    for i, size in enumerate(sizes):
        res = {name: [] for name in ENVS}
        for r in range(ROUNDS):
            order = list(ENVS) if (i + r) % 2 == 0 else list(ENVS)[::-1]
            for name in order:
                res[name].append(run_child(ENVS[name], size, args.repeat))
        for name, runs in res.items():
            for run in runs:
                if run["n_problems"]:
                    failed = True
                    print(f"FAIL {name} torch {run['torch']} size {size}: {run['n_problems']} wrong nodes, "
                          f"e.g. {run['problems']}")
        digests = {run["digest"] for runs in res.values() for run in runs}
        if len(digests) != 1:
            failed = True
            print(f"FAIL size {size}: the environments built different graphs {digests}")
        n = res["ours"][0]["n_call"]
        per_node = {name: {key: statistics.median(t for run in runs for t in run[key]) / n * 1e6
                           for key in ("copy_s", "walk_s")} for name, runs in res.items()}
        rows.append((size, n, res["ours"][0]["n_graphs"], per_node))
    versions = {name: runs[0]["torch"] for name, runs in res.items()}

    base = rows[0][3]
    print(f"ours = torch {versions['ours']}, upstream = torch {versions['upstream']}; "
          f"median of {args.repeat} runs x {ROUNDS} processes per side; µs per call_function node")
    vs = f"x{rows[0][0]}"  # per-node time relative to the first (smallest) size
    print(f"{'size':>7} {'nodes':>7} {'graphs':>6} {'ours':>7} {'upstream':>9} {'ours/up':>8} "
          f"{'ours ' + vs:>10} {'up ' + vs:>8} {'walk ours':>10} {'walk up':>8}")
    for size, n, n_graphs, p in rows:
        o, u = p["ours"]["copy_s"], p["upstream"]["copy_s"]
        print(f"{size:>7} {n:>7} {n_graphs:>6} {o:>7.3f} {u:>9.3f} {o / u:>8.2f} "
              f"{o / base['ours']['copy_s']:>10.2f} {u / base['upstream']['copy_s']:>8.2f} "
              f"{p['ours']['walk_s']:>10.3f} {p['upstream']['walk_s']:>8.3f}")

    scale = {name: rows[-1][3][name]["copy_s"] / base[name]["copy_s"] for name in ENVS}
    print(f"linear scaling, per-node {rows[-1][0]} vs {rows[0][0]} <= {LINEAR_TARGET}x: "
          f"{'met' if scale['ours'] <= LINEAR_TARGET else 'MISSED'} "
          f"(ours {scale['ours']:.2f}x, upstream {scale['upstream']:.2f}x)")
    ratio, at = max((p["ours"]["copy_s"] / p["upstream"]["copy_s"], size) for size, _, _, p in rows)
    verdict = "met" if ratio <= RATIO_TARGET else "met within noise" if ratio <= NOISE else "MISSED"
    print(f"ours/upstream <= {RATIO_TARGET} at every size: {verdict} (worst {ratio:.2f} at {at})")
    print("correctness: " + ("FAILED (see above)" if failed else "every backward node got its forward metadata"))


if __name__ == "__main__":
    main()
