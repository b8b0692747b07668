"""Regional Inductor's region building at the scale of real models: ours against the partitioner, side by side.

Region building is the step of regional_inductor that groups the marked nodes of each region into partitions
(``_create_inductor_marked_regions``' grouping) and then fuses each partition into a submodule
(``fuse_by_partitions``). The grouping is timed for three sides, each in a fresh interpreter:

- ours: ``torch.fx.passes.infra._linear_partitioner.propose_partitions`` for each region (the installed
  release's series, patch ``local-regional-inductor-linear-partitions``);
- release: the installed release's ``CapabilityBasedPartitioner(allows_single_node_partition=True)`` for each
  region (what the pass ran before the patch: on 2.8+ exactly, on 2.5.1-2.7.1 the release's partitioner, whose
  rules the series' own quadratic grouping used to reproduce);
- 2.13: upstream 2.13's ``CapabilityBasedPartitioner`` in ``.venv-oracle`` (what upstream's pass runs).

Graphs: the residual chain of issue 33 (``x = x + relu(x)``, N ops, every op marked except one in 25: N/50
regions) at N = 1k..32k; and the forward and backward graphs of bench/regional_inductor.py's GPT block stack
(dim 64, attention and MLP of every block marked) at 24 and 48 layers, captured with a recording aot_autograd
backend on each side. Per measurement: wall time of the grouping, and its peak memory (tracemalloc, a second
run; on the GPT graphs for ours only); a side that took longer than ``--limit`` seconds at one size is not run at
larger ones. ``fuse`` is the release's ``fuse_by_partitions`` on our partitions, as the pass calls it (the patch
leaves the fuse step as the release has it: each partition checked for cycles by ``validate_partition``).

The whole step (``--no-step`` leaves it out), on the residual chain: ours is the pass's own
``_create_inductor_marked_regions`` (grouping + fuse); release is the release's partitioner and its
``fuse_by_partitions`` (the pass before the patch); 2.13 the same in the oracle. Beside it the fuse alone on our
partitions (the release's ``fuse_by_partitions``, which the patched pass runs). Each cell wall / CPU seconds (the machine is shared: CPU time is the steadier figure), growth of the
CPU time per doubling, and peak memory (tracemalloc, a second run).

    .venv/bin/python bench/regional_scale.py                          # everything, about 10 minutes
    .venv/bin/python bench/regional_scale.py --sizes 1000,2000 --no-gpt --limit 30
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in a fresh interpreter: build one graph, time one side's grouping (and, asked, peak memory or the fuse).
MEASURE = r"""
import json, sys, time, tracemalloc
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
import torch
from partition_graphs import marked_regions, model_graphs

def chain(n):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mark = {"compile_with_inductor": 0}
    for k in range(0, n, 2):
        r = graph.call_function(torch.ops.aten.relu.default, (x,))
        x = graph.call_function(torch.ops.aten.add.Tensor, (x, r))
        for i, node in enumerate((r, x), k):
            if i % 25 != 24:
                node.meta["custom"] = dict(mark)
    graph.output((x,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)

if spec["graph"] == "random":
    # a random graph of test/fx/partition_graphs.py (its seed picks how many ops are marked and how far back
    # an op takes its inputs, so the number of partitions grows with the graph or stays small)
    import random
    from partition_graphs import _Holder, random_graph
    rng = random.Random(spec["seed"])
    graph, regions = random_graph(rng, spec["n"])
    gm = _Holder(graph)
else:
    if spec["graph"] == "chain":
        gm = chain(spec["n"])
    else:
        graphs = model_graphs(spec["graph"])
        gm = graphs[spec["index"]]
    regions = marked_regions(gm.graph)

def group():
    if spec["side"] == "ours":
        from torch.fx.passes.infra._linear_partitioner import propose_partitions
        from torch.fx.passes.operator_support import create_op_support
        return [p for r in regions
                for p in propose_partitions(gm, create_op_support(lambda submodules, node, r=r: node in r))]
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import create_op_support
    out = []
    for r in regions:
        support = create_op_support(lambda submodules, node, r=r: node in r)
        out += [p.nodes for p in CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()]
    return out

def fuse(partitions):
    # this release's fuse_by_partitions, as the pass calls it (the patch leaves the fuse step as it is)
    import inspect
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
    kwargs = {}
    if "always_return_tuple" in inspect.signature(fuse_by_partitions).parameters and spec.get("tuple"):
        kwargs["always_return_tuple"] = True
    return fuse_by_partitions(gm, partitions, prefix="__marked_inductor_submod", **kwargs)

def step():
    # the whole step: ours is the pass's own _create_inductor_marked_regions; the release's is its partitioner
    # and its fuse_by_partitions (the pass before the patch)
    if spec["side"] == "ours":
        from torch.fx.passes.regional_inductor import _create_inductor_marked_regions
        return _create_inductor_marked_regions(gm)
    return fuse([dict.fromkeys(p) for p in group()])

if spec["what"] in ("step", "fuse_only"):
    # wall and CPU time (the machine is shared: CPU time is the steadier figure), or peak memory (tracemalloc)
    if spec["what"] == "fuse_only":
        partitions = group()
        run = lambda: fuse([dict.fromkeys(p) for p in partitions])
    else:
        run = step
    import gc
    gc.collect()
    if spec.get("memory"):
        tracemalloc.start()
        run()
        out = {"peak_mb": tracemalloc.get_traced_memory()[1] / 1e6}
        tracemalloc.stop()
    else:
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        out = {"seconds": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    out["nodes"] = len(gm.graph.nodes) if spec["what"] == "fuse_only" else spec.get("n")
    out["submodules"] = sum(n.op == "call_module" for n in gm.graph.nodes)
    print(json.dumps(out))
    sys.exit(0)

result = {"nodes": len(gm.graph.nodes), "torch": torch.__version__}
if spec["what"] == "memory":
    tracemalloc.start()
    partitions = group()
    result["peak_mb"] = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
else:
    start, cpu = time.perf_counter(), time.process_time()
    partitions = group()
    result["seconds"] = time.perf_counter() - start
    result["cpu"] = time.process_time() - cpu
    if spec["what"] == "fuse":
        start = time.perf_counter()
        fuse([dict.fromkeys(p) for p in partitions])
        result["fuse_seconds"] = time.perf_counter() - start
result["partitions"] = len(partitions)
print(json.dumps(result))
"""


def measure(python: Path, spec: dict, limit: float) -> dict | None:
    """One measurement in a fresh ``python``; None when it ran past ``limit`` seconds."""
    try:
        out = subprocess.run([str(python), "-c", MEASURE, str(REPO / "test" / "fx"), json.dumps(spec)],
                             capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        raise SystemExit(f"{python} {spec} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(r: dict | None, limit: float, prev: dict | None = None) -> str:
    if r is None:
        return f"over {limit:.0f} s"
    text = f"{r['seconds']:.2f} s"
    if "peak_mb" in r:
        text += f", {r['peak_mb']:.1f} MB"
    if prev is not None:
        text += f" (x{r['seconds'] / max(prev['seconds'], 1e-9):.1f})"
    return text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,2000,4000,8000,16000,32000")
    p.add_argument("--limit", type=float, default=120.0, help="seconds a side may take for one graph")
    p.add_argument("--no-gpt", action="store_true")
    p.add_argument("--no-chain", action="store_true", help="no grouping table")
    p.add_argument("--no-step", action="store_true", help="no whole-step / fuse table")
    p.add_argument("--random", default="", metavar="SEEDS",
                   help="also a grouping table of random graphs of these seeds (ours only), e.g. 0,3,8,10")
    p.add_argument("--layers", default="24,48", help="GPT sizes")
    p.add_argument("--sides", default="ours,release,2.13", help="which sides to run")
    p.add_argument("--oracle", type=Path, default=REPO / ".venv-oracle" / "bin" / "python")
    args = p.parse_args()
    sides = {"ours": Path(sys.executable), "release": Path(sys.executable)}
    if args.oracle.exists():
        sides["2.13"] = args.oracle
    sides = {k: v for k, v in sides.items() if k in args.sides.split(",") or k == "ours"}
    import torch

    print(f"torch {torch.__version__}; grouping: wall time, peak memory (tracemalloc), growth per doubling; "
          f"fuse: the release's fuse_by_partitions on our partitions")
    if not args.no_chain:
        chain_table(args, sides)
    if not args.no_step:
        step_table(args, sides)
    if args.random:
        random_table(args, sides)
    if not args.no_gpt:
        gpt_table(args, sides)
    return 0


def random_table(args, sides: dict) -> None:
    """Our grouping on random graphs (ours only: the partitioners take minutes at these sizes), CPU seconds and
    growth per doubling: where the number of partitions grows with the graph, the bit sets widen with it."""
    print()
    print("Random graphs (test/fx/partition_graphs.py, one seed per row): nodes / partitions, CPU seconds of our "
          "grouping (growth per doubling)")
    print()
    sizes = list(map(int, args.sizes.split(",")))
    print("| seed | " + " | ".join(f"{n:,} ops" for n in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for seed in map(int, args.random.split(",")):
        cells, prev = [], None
        for n in sizes:
            r = measure(sides["ours"], {"graph": "random", "seed": seed, "n": n, "side": "ours", "what": "time"},
                        args.limit)
            if r is None:
                cells.append(f"over {args.limit:.0f} s")
                break
            growth = f" (x{r['cpu'] / max(prev['cpu'], 1e-9):.1f})" if prev else ""
            cells.append(f"{r['nodes']:,} / {r['partitions']:,}: {r['cpu']:.2f} s{growth}")
            prev = r
        print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)


def chain_table(args, sides: dict) -> None:
    print()
    print("| nodes | regions | " + " | ".join(sides) + " | fuse |")
    print("|---" * (len(sides) + 3) + "|")
    stopped: set = set()
    previous: dict = {}
    fuse_stopped = False
    for n in map(int, args.sizes.split(",")):
        row = {}
        for side, python in sides.items():
            spec = {"graph": "chain", "n": n, "side": "ours" if side == "ours" else "release"}
            if side in stopped:
                row[side] = None
                continue
            r = measure(python, dict(spec, what="time"), args.limit)
            if r is not None:
                m = measure(python, dict(spec, what="memory"), args.limit * 3)
                r["peak_mb"] = m["peak_mb"] if m else float("nan")
            else:
                stopped.add(side)
            row[side] = r
        fuse = None if fuse_stopped else measure(sides["ours"], {"graph": "chain", "n": n, "side": "ours",
                                                                  "what": "fuse"}, args.limit)
        fuse_stopped = fuse is None
        first = row["ours"]
        cells = [cell(row[s], args.limit, previous.get(s)) for s in sides]
        fuse_cell = f"{fuse['fuse_seconds']:.2f} s" if fuse else f"over {args.limit:.0f} s"
        print(f"| {first['nodes']:,} | {first['partitions']} | " + " | ".join(cells) + f" | {fuse_cell} |",
              flush=True)
        previous = {s: r for s, r in row.items() if r is not None}


def step_cell(r: dict | None, limit: float, prev: dict | None = None) -> str:
    """wall / CPU seconds, growth of the CPU time per doubling, peak memory."""
    if r is None:
        return f"over {limit:.0f} s"
    text = f"{r['seconds']:.2f} / {r['cpu']:.2f} s"
    if prev is not None:
        text += f" (x{r['cpu'] / max(prev['cpu'], 1e-9):.1f})"
    if "peak_mb" in r:
        text += f", {r['peak_mb']:.0f} MB"
    return text


def step_table(args, sides: dict) -> None:
    """The whole step (grouping + fuse: _create_inductor_marked_regions), ours and the release's side by side, and
    the fuse alone (the release's fuse_by_partitions on our partitions: what the patched pass runs)."""
    print()
    print("Whole step (grouping + fuse) and fuse alone (the release's, on our partitions); each cell: wall / CPU "
          "seconds (growth of the CPU time per doubling), peak memory (tracemalloc)")
    print()
    step_sides = {s: sides[s] for s in ("ours", "release", "2.13") if s in sides}
    heads = [f"step ({s})" for s in step_sides] + ["fuse"]
    print("| nodes | submodules | " + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 2) + "|")
    stopped: set = set()
    previous: dict = {}
    for n in map(int, args.sizes.split(",")):
        row: dict = {}
        jobs = [(f"step ({s})", python, {"what": "step", "side": "ours" if s == "ours" else "release"})
                for s, python in step_sides.items()]
        jobs += [("fuse", sides["ours"], {"what": "fuse_only", "side": "ours"})]
        for head, python, extra in jobs:
            if head in stopped:
                row[head] = None
                continue
            spec = dict(extra, graph="chain", n=n, tuple=True)
            r = measure(python, spec, args.limit)
            if r is None:
                stopped.add(head)
            elif head in ("step (ours)", "fuse"):
                m = measure(python, dict(spec, memory=True), args.limit * 3)
                r["peak_mb"] = m["peak_mb"] if m else float("nan")
            row[head] = r
        subs = row["step (ours)"]["submodules"] if row.get("step (ours)") else "?"
        print(f"| {n:,} | {subs} | " + " | ".join(step_cell(row[h], args.limit, previous.get(h)) for h in heads)
              + " |", flush=True)
        previous = {h: r for h, r in row.items() if r is not None}


def gpt_table(args, sides: dict) -> None:
    print()
    print("GPT block stack (bench/regional_inductor.py, dim 64), forward (graph 0) and backward (graph 1):")
    print()
    print("| layers | graph | nodes / partitions | " + " | ".join(sides) + " | fuse |")
    print("|---" * (len(sides) + 4) + "|")
    for layers in map(int, args.layers.split(",")):
        for index, label in ((0, "forward"), (1, "backward")):
            row = {}
            for side, python in sides.items():
                spec = {"graph": f"gpt{layers}", "index": index, "side": "ours" if side == "ours" else "release"}
                # The graph is captured in each run (a minute or so for 48 layers), so the limit is raised.
                r = measure(python, dict(spec, what="fuse" if side == "ours" else "time"), args.limit + 300)
                if r is not None and side == "ours":
                    m = measure(python, dict(spec, what="memory"), args.limit + 300)
                    r["peak_mb"] = m["peak_mb"] if m else float("nan")
                row[side] = r
            first = row["ours"]
            print(f"| {layers} | {label} | {first['nodes']:,} / {first['partitions']} | "
                  + " | ".join(cell(row[s], args.limit + 300) for s in sides)
                  + f" | {first['fuse_seconds']:.2f} s |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
