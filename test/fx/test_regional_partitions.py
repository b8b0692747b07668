"""regional_inductor groups the marked nodes of each region exactly as upstream's CapabilityBasedPartitioner does
(torch 2.13's rules): the same partitions, in the same order, each with its nodes in the same order, so the pass
makes the same __marked_inductor_submodN with the same code as upstream.  On every release the pass groups with
torch.fx.passes.infra._linear_partitioner (patch local-regional-inductor-linear-partitions), which makes the
partitioner's decisions without its quadratic time and memory; these tests hold it against the 2.13 oracle's
partitioner (.venv-oracle) on random graphs and on the forward and backward graphs of real models.  The fuse
that follows is the release's own fuse_by_partitions, called as the release calls it.  Timing is in
bench/regional_scale.py, never here."""
import importlib.util
import json
import random
import sys
import unittest
from pathlib import Path

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from oracle_interpreter import oracle_json, requires_oracle  # noqa: E402
from partition_graphs import (  # noqa: E402
    ORACLE_SIDE, graph_spec, linear_partitions, marked_regions, model_graphs, random_graph)


# Every series carries the patch; a release whose series does not yet (a port in progress) says so.
requires_linear_partitioner = unittest.skipUnless(
    importlib.util.find_spec("torch.fx.passes.infra._linear_partitioner") is not None,
    f"the torch {torch.__version__} series does not carry local-regional-inductor-linear-partitions")


# The GPT's blocks per release. The oracle's partitioner is quadratic: the 24-block backward graph (over 2,000
# nodes) is most of test_model_graphs' time. torch/fx/passes/infra/_linear_partitioner.py is the same file on
# every release from 2.5.1 to 2.14.1 (2.15.0 has its own copy), so the 24-block model runs on the two ends of the
# matrix, as CI's patch coverage does (.ci/run), and an 8-block one on the releases between (CI time).
GPT_BLOCKS = {"2.5.1": 24, "2.15.0": 24}


def upstream(specs):
    """The partitions the 2.13 oracle's CapabilityBasedPartitioner proposes for each spec."""
    return oracle_json("-c", ORACLE_SIDE, str(HERE), input=json.dumps(specs), timeout=900)


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
        and of a GPT (attention and MLP marked, one region), each graph and HOP subgraph. The GPT has 24 blocks
        on the two ends of the matrix (GPT_BLOCKS) and 8 between them."""
        blocks = GPT_BLOCKS.get(torch.__version__.split("+")[0], 8)
        cases = []
        for name in ("hf_llama", "hf_gpt2", f"gpt{blocks}"):
            for i, gm in enumerate(model_graphs(name)):
                regions = marked_regions(gm.graph)
                if regions:
                    cases.append((f"{name} graph {i}", gm.graph, regions))
        self.assertGreaterEqual(len(cases), 6)
        ours = self.assert_same_as_upstream(cases)
        # The GPT: two regions per block forward, three backward (the 24-block backward graph has over 2,000
        # nodes).
        self.assertEqual([len(p) for p in ours[-2:]], [2 * blocks, 3 * blocks])


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


if __name__ == "__main__":
    run_tests()
