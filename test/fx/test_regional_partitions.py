"""regional_inductor groups the marked nodes of each region exactly as upstream's CapabilityBasedPartitioner does
(torch 2.13's rules): the same partitions, in the same order, each with its nodes in the same order, so the pass
makes the same __marked_inductor_submodN with the same code as upstream.  On every release the pass groups with
torch.fx.passes.infra._linear_partitioner (patch local-regional-inductor-linear-partitions), which makes the
partitioner's decisions in near-linear time; these tests hold it against the 2.13 oracle's partitioner
(.venv-oracle) on random graphs and on the forward and backward graphs of real models.  Timing is in
bench/regional_scale.py, never here."""
import importlib.util
import json
import random
import subprocess
import sys
import unittest
from pathlib import Path

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from oracle_interpreter import ORACLE_PYTHON, requires_oracle  # noqa: E402
from partition_graphs import (  # noqa: E402
    ORACLE_SIDE, graph_spec, linear_partitions, marked_regions, model_graphs, random_graph)


# Every series carries the patch; a release whose series does not yet (a port in progress) says so.
requires_linear_partitioner = unittest.skipUnless(
    importlib.util.find_spec("torch.fx.passes.infra._linear_partitioner") is not None,
    f"the torch {torch.__version__} series does not carry local-regional-inductor-linear-partitions")


def upstream(specs):
    """The partitions the 2.13 oracle's CapabilityBasedPartitioner proposes for each spec."""
    out = subprocess.run([str(ORACLE_PYTHON), "-c", ORACLE_SIDE, str(HERE)], input=json.dumps(specs),
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AssertionError(f"oracle failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


@requires_oracle
@requires_linear_partitioner
class TestRegionalPartitions(TestCase):
    def assert_same_as_upstream(self, cases):
        """``cases``: (label, graph, regions); every graph's partitions equal the oracle's, order included."""
        ours = [linear_partitions(graph, regions) for _, graph, regions in cases]
        theirs = upstream([graph_spec(graph, regions) for _, graph, regions in cases])
        differ = [(label, a, b) for (label, _, _), a, b in zip(cases, ours, theirs) if a != b]
        self.assertEqual(len(ours), len(theirs))
        if differ:
            label, a, b = differ[0]
            self.fail(f"{len(differ)} of {len(cases)} graphs partitioned otherwise than upstream; first, {label}:\n"
                      f"ours     {a}\nupstream {b}")
        return ours

    def test_random_graphs(self):
        """1,500 random graphs of 4 to 60 ops (branches, joins, multi-output ops and getitems, HOP-like calls
        of get_attr subgraphs, up to three region ids) and 40 of 150 to 400 ops."""
        rng = random.Random(0)
        cases = [(f"graph {i}", *random_graph(rng, rng.randint(4, 60))) for i in range(1500)]
        cases += [(f"large graph {i}", *random_graph(rng, rng.randint(150, 400))) for i in range(40)]
        ours = self.assert_same_as_upstream(cases)
        # The corpus makes the partitioner merge and refuse: many graphs have several partitions.
        self.assertGreater(sum(len(p) > 2 for p in ours), 400)

    def test_model_graphs(self):
        """The forward and backward graphs of HF LLaMA and GPT-2 (attention and MLP regions of their own ids)
        and of a 24-block GPT (attention and MLP marked, one region), each graph and HOP subgraph."""
        cases = []
        for name in ("hf_llama", "hf_gpt2", "gpt24"):
            for i, gm in enumerate(model_graphs(name)):
                regions = marked_regions(gm.graph)
                if regions:
                    cases.append((f"{name} graph {i}", gm.graph, regions))
        self.assertGreaterEqual(len(cases), 6)
        ours = self.assert_same_as_upstream(cases)
        # The 24-block GPT: 48 regions in each direction, its backward graph over 2,000 nodes.
        self.assertEqual([len(p) for p in ours[-2:]], [48, 72])


@requires_linear_partitioner
class TestRegionalPartitionsLocal(TestCase):
    def test_pass_groups_with_linear_partitioner(self):
        """The pass's regions are those propose_partitions gives, numbered in its order."""
        from torch.fx.passes.regional_inductor import _create_inductor_marked_regions

        rng = random.Random(1)
        graph, regions = random_graph(rng, 40)
        while len(regions) < 2:
            graph, regions = random_graph(rng, 40)
        for node in graph.nodes:
            if node.op == "get_attr":  # the pass would look for the subgraph
                node.op, node.target = "call_function", torch.ops.aten.add.Tensor
        for i, region in enumerate(regions):
            for node in region:
                node.meta["custom"] = {"compile_with_inductor": {"inductor_region": i}}
        expected = [sorted(name for name, _ in p) for p in linear_partitions(graph, marked_regions(graph))]
        gm = _create_inductor_marked_regions(torch.fx.GraphModule(torch.nn.Module(), graph))
        got = []
        for node in gm.graph.nodes:
            if node.op == "call_module":
                sub = getattr(gm, node.target)
                got.append((int(node.target.rsplit("submod", 1)[1]),
                            sorted(n.name for n in sub.graph.nodes if n.op not in ("placeholder", "output"))))
        self.assertEqual([names for _, names in sorted(got)], expected)


def _fusable(graph):
    """``graph`` in a GraphModule whose root holds a module for each get_attr (a HOP-like call's subgraph), so
    fuse_by_partitions can lift them into the submodules."""
    root = torch.nn.Module()
    for node in graph.nodes:
        if node.op == "get_attr":
            setattr(root, node.target, torch.nn.Module())
    return torch.fx.GraphModule(root, graph)


def _fuse_outcome(make, validate_all_at_once):
    """Fuse the partitions regional_inductor makes of ``make()``'s graph (propose_partitions, each region in
    turn) with this release's fuse_by_partitions, and return everything the result shows: the root's code and
    nodes, each submodule's name and code; or, when it raises, the error and the graph as the error left it."""
    from torch.fx.passes.infra._linear_partitioner import propose_partitions
    from torch.fx.passes.operator_support import create_op_support
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

    graph, regions = make()
    gm = _fusable(graph)
    partitions = [p for region in regions for p in propose_partitions(
        gm, create_op_support(lambda submodules, node, region=region: node in region))]
    kwargs = {"validate_all_at_once": True} if validate_all_at_once else {}
    try:
        fuse_by_partitions(gm, partitions, prefix="__marked_inductor_submod", **kwargs)
    except Exception as e:  # the same error, left at the same point, is part of the outcome
        return ("raised", type(e).__name__, str(e), [n.format_node() for n in gm.graph.nodes],
                [(name, m.code) for name, m in gm.named_children() if isinstance(m, torch.fx.GraphModule)])
    return ("fused", gm.code, [n.format_node() for n in gm.graph.nodes],
            [(name, type(m).__name__, m.code) for name, m in gm.named_children()
             if isinstance(m, torch.fx.GraphModule)])


@requires_linear_partitioner
class TestRegionalFuse(TestCase):
    """regional_inductor fuses its partitions with fuse_by_partitions(validate_all_at_once=True): every partition
    checked for cycles in one pass over the graph instead of one walk of everything downstream per partition.
    The fused graph must be byte for byte what the release's own per-partition path makes (node names, order,
    code of the root and of every submodule), and a partition that makes a cycle must raise the same error with
    the graph left in the same state."""

    def assert_same_fuse(self, make):
        ours, release = _fuse_outcome(make, True), _fuse_outcome(make, False)
        self.assertEqual(ours, release)
        return ours[0]

    def test_random_graphs(self):
        """300 random graphs of 4 to 60 ops (branches, joins, multi-output ops and getitems, HOP-like calls of
        get_attr subgraphs, up to three region ids) and 8 of 150 to 400 ops."""
        outcomes = []
        for seed, size in [(i, (4, 60)) for i in range(300)] + [(1000 + i, (150, 400)) for i in range(8)]:
            def make(seed=seed, size=size):
                rng = random.Random(seed)
                return random_graph(rng, rng.randint(*size))
            outcomes.append(self.assert_same_fuse(make))
        # Regions of several ids can make partitions that close a cycle through one another: those raise, the
        # rest fuse, and both are in the corpus.
        self.assertGreater(outcomes.count("fused"), 200)
        self.assertGreater(outcomes.count("raised"), 0)

    def test_cycle_between_regions(self):
        """a -> b and c -> d, {a, d} a region and {b, c} another: each is a partition, the first fuses, and the
        second then makes a cycle through it (c -> {a, d} -> b)."""
        def make():
            graph = torch.fx.Graph()
            x = graph.placeholder("x")
            a = graph.call_function(torch.ops.aten.relu.default, (x,))
            b = graph.call_function(torch.ops.aten.neg.default, (a,))
            c = graph.call_function(torch.ops.aten.exp.default, (x,))
            d = graph.call_function(torch.ops.aten.add.Tensor, (a, c))
            graph.output((b, d))
            return graph, [{a, d}, {b, c}]
        outcome = _fuse_outcome(make, True)
        self.assertEqual(outcome[:3], ("raised", "AssertionError", "Invalid partition, found dependency cycles"))
        self.assert_same_fuse(make)

    def test_residual_chain(self):
        """The residual chain of bench/regional_scale.py, 2,000 ops in 80 partitions."""
        def make():
            graph = torch.fx.Graph()
            x = graph.placeholder("x")
            marked = set()
            for k in range(0, 2000, 2):
                r = graph.call_function(torch.ops.aten.relu.default, (x,))
                x = graph.call_function(torch.ops.aten.add.Tensor, (x, r))
                marked.update(n for i, n in enumerate((r, x), k) if i % 25 != 24)
            graph.output((x,))
            return graph, [marked]
        self.assertEqual(self.assert_same_fuse(make), "fused")


if __name__ == "__main__":
    run_tests()
