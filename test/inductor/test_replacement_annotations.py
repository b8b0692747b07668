"""Inductor's pattern replacements keep the annotation of the ops they replace
(local-inductor-replacement-annotation, beyond upstream): the nodes a pattern
inserts take custom, seq_nr and autograd_backward from the match's output node.
Upstream (through 2.15) traces the replacement apart from the user's program and
leaves its nodes without custom: the softmax rewrite's amax, sub and mul drop out
of the annotated region in the post-grad graphs."""
import contextlib

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor import config as inductor_config
from torch.testing._internal.common_utils import TestCase, run_tests


class TwoRegions(torch.nn.Module):
    """An attention-like softmax and an MLP, each in a region of its own. The
    input needs no gradient, so no gradient is accumulated across regions."""

    def __init__(self, annotated=True):
        super().__init__()
        self.annotated = annotated
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def region(self, name):
        if self.annotated:
            return fx_traceback.annotate({"region": name})
        return contextlib.nullcontext()

    def forward(self, x):
        with self.region("scale"):
            scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.25
        with self.region("attention"):
            probs = torch.softmax(scores, dim=-1) @ x
        with self.region("mlp"):
            return self.down(torch.relu(self.up(probs)))


class TestReplacementAnnotations(TestCase):
    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()
        super().tearDown()

    def post_grad_nodes(self, model, keys=("custom",)):
        """(target, *meta values of keys) of every call_function node of the
        post-grad forward and backward graphs Inductor compiles for a training
        step of model; the key "backward" says whether the node's graph is the
        backward graph."""
        nodes = []

        def record(graph):
            backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
            meta = {"backward": backward}
            nodes.extend(
                (str(n.target), *(meta[k] if k in meta else n.meta.get(k) for k in keys))
                for n in graph.nodes
                if n.op == "call_function"
            )

        torch.manual_seed(0)
        x = torch.randn(2, 8, 16)
        with inductor_config.patch(post_grad_custom_post_pass=record, fx_graph_cache=False):
            torch.compile(model, backend="inductor")(x).sum().backward()
        return nodes

    def test_every_post_grad_node_keeps_its_region(self):
        nodes = self.post_grad_nodes(TwoRegions())
        self.assertTrue(any(target == "aten.amax.default" for target, _ in nodes))
        self.assertEqual([n for n in nodes if n[1] is None], [])

    def test_a_match_across_regions_takes_the_region_of_its_output(self):
        # The joint-graph rewrite of scale(x) - scale(x).amax() matches the
        # scaling mul of "scale" and the amax and sub of "attention"; the
        # nodes it inserts compute the sub's value, so they are "attention".
        nodes = self.post_grad_nodes(TwoRegions())
        amax = [custom for target, custom in nodes if target == "aten.amax.default"]
        self.assertTrue(amax)
        self.assertEqual([custom for custom in amax if custom != {"region": "attention"}], [])

    def test_every_post_grad_node_keeps_its_seq_nr_and_autograd_backward(self):
        # The nodes a pattern inserts pair with the forward op by seq_nr, and
        # those of the backward graph say they run in the backward, as every
        # other node of an annotated program does.
        nodes = self.post_grad_nodes(TwoRegions(), keys=("seq_nr", "backward", "autograd_backward"))
        self.assertTrue(any(target == "aten.amax.default" for target, *_ in nodes))
        self.assertEqual([n for n in nodes if n[1] is None], [])
        self.assertEqual([n for n in nodes if n[2] and n[3] is not True], [])

    def test_unannotated_graphs_get_no_annotation(self):
        nodes = self.post_grad_nodes(TwoRegions(annotated=False))
        self.assertTrue(any(target == "aten.amax.default" for target, _ in nodes))
        self.assertEqual([n for n in nodes if n[1] is not None], [])


if __name__ == "__main__":
    run_tests()
