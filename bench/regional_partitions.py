"""Does regional_inductor group the marked nodes as upstream's partitioner does?

local-regional-inductor-linear-partitions groups the marked nodes with torch.fx.passes.infra._linear_partitioner,
which proposes the partitions of upstream's (2.13) CapabilityBasedPartitioner without its quadratic cost. This
builds random graphs from a seed (chains and joins of ops, some ops with several outputs taken by getitems, a
random subset marked ``compile_with_inductor``), groups each with the installed pass's grouping and with the
2.13 oracle's CapabilityBasedPartitioner (``.venv-oracle``, the partitioner upstream's pass calls), and counts
the graphs whose groups differ (as sets, and in order, which numbers the ``__marked_inductor_submodN``). The
installed release's own partitioner is counted too, for comparison: before 2.8 it proposes the same groups on
these graphs but often in another order (2.8 merges the smaller partition into the larger and keeps the larger
one's id), so the pass would number the regions, and name the graph's nodes, otherwise than upstream.

With ``--region-ids`` each marked op also names an ``inductor_region`` id (0 or 1) or none (the default region),
and both sides group each region in turn, as upstream's pass does from 2.12 (179209-regional-inductor-region-ids
before that); the groups of all regions, in that order, are compared.

    .venv/bin/python bench/regional_partitions.py --graphs 400     # on a patched 2.5.1, 2.6.0 or 2.7.1
    .venv/bin/python bench/regional_partitions.py --graphs 400 --region-ids   # on any patched release
"""
from __future__ import annotations

import argparse
import json
import operator
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REGION = "default"  # the region of marked ops whose annotation names no inductor_region

# Run by the oracle's Python: the groups CapabilityBasedPartitioner proposes for each graph on stdin.
ORACLE_SIDE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from regional_partitions import build, partitioner_groups
print(json.dumps([partitioner_groups(build(spec)) for spec in json.load(sys.stdin)]))
"""


def random_spec(rng: random.Random, size: int, region_ids: bool = False) -> list[dict]:
    """A graph as data: each op names the earlier values it takes (placeholders are values 0 and 1), whether
    it is marked (with ``region_ids``, under which inductor_region id: 0, 1 or none), and how many getitems
    take its outputs (0: one output)."""
    values, ops = 2, []
    for _ in range(size):
        inputs = rng.sample(range(values), k=min(values, rng.choice((1, 1, 2, 2, 3))))
        marked = rng.random() < 0.55
        outputs = rng.choice((0, 0, 0, 0, 2, 3))
        ops.append({"inputs": inputs, "marked": marked, "outputs": outputs,
                    "getitems_marked": [marked if rng.random() < 0.85 else not marked for _ in range(outputs)]})
        if region_ids:
            ops[-1]["region"] = rng.choice((None, 0, 1))
        values += max(outputs, 1) + (1 if outputs else 0)
    return ops


def build(spec: list[dict]):
    """The GraphModule of a spec: op k is aten.add (one output) or aten.split (several, each a getitem)."""
    import torch

    graph = torch.fx.Graph()
    values = [graph.placeholder("x"), graph.placeholder("y")]
    for op in spec:
        region = op.get("region")
        annotation = {"compile_with_inductor": 0 if region is None else {"inductor_region": region}}
        args = [values[i] for i in op["inputs"]]
        if op["outputs"]:
            node = graph.call_function(torch.ops.aten.split.Tensor, (args[0], 1) + tuple(args[1:]))
            values.append(node)
            for k, mark in enumerate(op["getitems_marked"]):
                item = graph.call_function(operator.getitem, (node, k))
                if mark:
                    item.meta["custom"] = dict(annotation)
                values.append(item)
        else:
            node = graph.call_function(torch.ops.aten.add.Tensor, tuple(args))
            values.append(node)
        if op["marked"]:
            node.meta["custom"] = dict(annotation)
    used = {a for n in graph.nodes for a in n.all_input_nodes}
    graph.output(tuple(n for n in values if n not in used))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _marked(node) -> bool:
    return node.op not in ("placeholder", "output") and "compile_with_inductor" in (node.meta.get("custom") or {})


def regions(gm) -> list[set]:
    """The marked nodes by inductor_region id (one default region for those without), in the order each
    region's first node appears: the units upstream's pass partitions one at a time."""
    by_id: dict = {}
    for node in gm.graph.nodes:
        if _marked(node):
            mark = node.meta["custom"]["compile_with_inductor"]
            region = mark["inductor_region"] if isinstance(mark, dict) and "inductor_region" in mark else DEFAULT_REGION
            by_id.setdefault(region, set()).add(node)
    return list(by_id.values())


def partitioner_groups(gm) -> list[list[str]]:
    """The groups this torch's CapabilityBasedPartitioner proposes for each region in turn, in its order."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import create_op_support

    groups = []
    for region in regions(gm):
        support = create_op_support(lambda submodules, node, region=region: node in region)
        partitions = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()
        groups += [sorted(n.name for n in p.nodes) for p in partitions]
    return groups


def pass_groups(gm) -> list[list[str]]:
    """The groups the installed regional_inductor forms: those of torch.fx.passes.infra._linear_partitioner
    (local-regional-inductor-linear-partitions) for each region in turn, or the release's partitioner's where the
    series does not carry it."""
    try:
        from torch.fx.passes.infra._linear_partitioner import propose_partitions
    except ImportError:
        return partitioner_groups(gm)
    from torch.fx.passes.operator_support import create_op_support

    return [sorted(n.name for n in p) for region in regions(gm)
            for p in propose_partitions(gm, create_op_support(lambda submodules, node, region=region: node in region))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--region-ids", action="store_true", help="marked ops name inductor_region 0, 1 or none")
    p.add_argument("--oracle", type=Path, default=REPO / ".venv-oracle" / "bin" / "python")
    args = p.parse_args()
    import torch

    rng = random.Random(args.seed)
    specs = [random_spec(rng, rng.randint(4, 24), args.region_ids) for _ in range(args.graphs)]
    out = subprocess.run([str(args.oracle), "-c", ORACLE_SIDE, str(Path(__file__).parent)],
                         input=json.dumps(specs), capture_output=True, text=True, check=True).stdout
    upstream = json.loads(out)
    ours = [pass_groups(build(s)) for s in specs]
    release = [partitioner_groups(build(s)) for s in specs]
    differ = [i for i, (a, b) in enumerate(zip(ours, upstream)) if sorted(a) != sorted(b)]
    order = [i for i, (a, b) in enumerate(zip(ours, upstream)) if a != b and i not in differ]
    own = [i for i, (a, b) in enumerate(zip(release, upstream)) if sorted(a) != sorted(b)]
    own_order = [i for i, (a, b) in enumerate(zip(release, upstream)) if a != b and i not in own]
    ids = ", inductor_region ids" if args.region_ids else ""
    print(f"torch {torch.__version__}: {args.graphs} graphs (seed {args.seed}{ids}); regional_inductor's groups differ "
          f"from the 2.13 partitioner's on {len(differ)} (in order only: {len(order)}); the release's own "
          f"partitioner's on {len(own)} (in order only: {len(own_order)})")
    for i in (differ + order)[:5]:
        print(f"graph {i}: ours {ours[i]}\n  2.13 {upstream[i]}")
    return 1 if differ or order else 0


if __name__ == "__main__":
    sys.exit(main())
