"""Inductor's pattern replacements keep the annotation of the ops they replace
(local-inductor-replacement-annotation, beyond upstream). Upstream traces the replacement
apart from the user's program: through 2.13 its nodes have no custom, so the softmax
rewrite's amax, sub and mul drop out of the annotated region in the post-grad graphs
(the patch gives them the match's output node's custom); from 2.14 upstream's
percolate_tags gives them the replaced output's custom, and the patch copies only
seq_nr and autograd_backward, which no release gives them."""
import torch
import torch._dynamo
from torch._inductor import config as inductor_config
from torch.testing._internal.common_utils import TestCase, run_tests

from annotated_block import AnnotatedBlock
from inductor_caches import fresh_graphs


def three_regions(annotated=True):
    """The block of test/annotated_block.py, each of its parts a region of its own. The input needs no
    gradient, so no gradient is accumulated across regions."""
    return AnnotatedBlock({part: {"region": part} for part in ("scale", "attention", "mlp")}, annotated)


class TestReplacementAnnotations(TestCase):
    KEYS = ("custom", "seq_nr", "backward", "autograd_backward")

    @classmethod
    def setUpClass(cls):
        # One training step per model, compiled once for every test (C++ builds are slow on CI).
        super().setUpClass()
        # the two models' kernels are the same: built once (inductor_caches.py)
        with fresh_graphs():
            cls.annotated = cls.post_grad_nodes(three_regions())
            cls.unannotated = cls.post_grad_nodes(three_regions(annotated=False))

    @classmethod
    def post_grad_nodes(cls, model):
        """A dict per call_function node of the post-grad forward and backward graphs
        Inductor compiles for a training step of model: its target, the meta values
        of custom, seq_nr and autograd_backward, and whether its graph is the
        backward graph."""
        nodes = []

        def record(graph):
            backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
            nodes.extend(
                {"target": str(n.target), "backward": backward,
                 **{k: n.meta.get(k) for k in ("custom", "seq_nr", "autograd_backward")}}
                for n in graph.nodes
                if n.op == "call_function"
            )

        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(2, 8, 16)
        # inside setUpClass's fresh_graphs(): graphs compiled anew, so the post-grad pass sees them
        with inductor_config.patch(post_grad_custom_post_pass=record, fx_graph_cache=False):
            torch.compile(model, backend="inductor")(x).sum().backward()
        torch._dynamo.reset()
        return nodes

    def test_every_post_grad_node_keeps_its_region(self):
        self.assertIn("aten.amax.default", [n["target"] for n in self.annotated])
        self.assertEqual([n for n in self.annotated if n["custom"] is None], [])

    def test_a_match_across_regions_takes_the_region_of_its_output(self):
        # The joint-graph rewrite of scale(x) - scale(x).amax() matches the
        # scaling mul of "scale" and the amax and sub of "attention"; the
        # nodes it inserts compute the sub's value, so they are "attention".
        amax = [n["custom"] for n in self.annotated if n["target"] == "aten.amax.default"]
        self.assertTrue(amax)
        self.assertEqual([custom for custom in amax if custom != {"region": "attention"}], [])

    def test_rewritten_nodes_keep_their_seq_nr_and_autograd_backward(self):
        # The nodes the softmax rewrite inserts (its amax and sub, on every release) pair with the forward op
        # by seq_nr, and those of the backward graph say they run in the backward, as every other node of an
        # annotated program does. Only they are checked: other passes may insert nodes of their own.
        rewritten = [n for n in self.annotated if n["target"] in ("aten.amax.default", "aten.sub.Tensor")]
        self.assertEqual({n["target"] for n in rewritten}, {"aten.amax.default", "aten.sub.Tensor"})
        self.assertEqual([n for n in rewritten if n["seq_nr"] is None], [])
        self.assertEqual([n for n in rewritten if n["backward"] and n["autograd_backward"] is not True], [])

    def test_unannotated_graphs_get_no_annotation(self):
        self.assertIn("aten.amax.default", [n["target"] for n in self.unannotated])
        self.assertEqual([n for n in self.unannotated if n["custom"] is not None], [])


if __name__ == "__main__":
    run_tests()
