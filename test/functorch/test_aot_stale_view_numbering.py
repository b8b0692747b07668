"""A view made stale by a mutation of its base: one autograd numbering, annotated or not.

Autograd rebuilds a stale view's grad_fn lazily, inside the next op that collects the view's edges, after that
op's own Node took its number (or in the backward call, for a view returned as an output). The op's forward
nodes therefore take the rebuilt view Node's number: on the release (and upstream through 2.15) the view's
backward (``slice_backward``) pairs with the op, and the op's own backward pairs with no forward node. That
numbering does not depend on annotations, and the series keeps it in every program: whether an ``annotate()``
block encloses the op, or the program asks the view for metadata (``b.shape``, ``b.size()``) before using it,
changes neither the graphs nor their seq_nr. What annotations add on top is local-bw-seq-nr-ranges: the op's
own backward, whose number no forward node has, takes the annotation current when autograd numbered its Node,
the op's. The view's backward keeps pairing with the op, and so carries the op's region, as upstream's does
(README, "a stale view's backward pairs with the op that used it").
"""
import os
import sys
import warnings

import torch
from torch import nn
from torch.fx.traceback import annotate
from torch.testing._internal.common_utils import TestCase, instantiate_parametrized_tests, parametrize, run_tests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from graph_capture import RecordGraphs, call_function_nodes, compile_with_dynamo  # noqa: E402

from functorch.compile import aot_function  # noqa: E402

CAPTURES = {"aot_function": aot_function, "dynamo": compile_with_dynamo}


class UseOfStaleView(nn.Module):
    """``b`` is taken in "make", made stale in "mutation" (through another view of ``h``), used in "use"."""

    def forward(self, x):
        h = x * 2
        with annotate({"region": "make"}):
            b = h.narrow(0, 1, 2)
        with annotate({"region": "mutation"}):
            h[0].add_(1)
        with annotate({"region": "use"}):
            return b.sin()


class StaleViewReturned(nn.Module):
    """``bt`` is taken in "views", made stale in "mutation" and returned: autograd rebuilds its grad_fn in the
    backward call."""

    def forward(self, x):
        h = x * 2
        with annotate({"region": "views"}):
            bt = h.narrow(0, 1, 2).t()
        with annotate({"region": "mutation"}):
            h[0].add_(1)
        return h.cos().sum(), bt


class UnannotatedUseOfStaleView(nn.Module):
    def forward(self, x):
        h = x * 2
        b = h.narrow(0, 1, 2)
        h[0].add_(1)
        return b.sin()


class MetadataOfStaleView(nn.Module):
    """Asks a stale view for its metadata, makes it stale again, then uses it: none of the queries collects the
    view's edges, so autograd rebuilds its grad_fn once, in ``sin``."""

    def __init__(self, query):
        super().__init__()
        self.query = query

    def forward(self, x):
        h = x * 2
        b = h.narrow(0, 1, 2)
        h[0].add_(1)
        if self.query:
            b.shape, b.size(), b.dim(), b.is_contiguous()
        h[1].add_(1)
        return b.sin()


class InsideAnnotate(nn.Module):
    """``inner``'s whole forward inside one annotate() block."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with annotate({"r": 0}):
            return self.inner(x)


def record(module, compile_with):
    recorder = RecordGraphs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_with(module, fw_compiler=recorder.fw_compiler, bw_compiler=recorder.bw_compiler)
        outs = compiled(torch.randn(4, 3, requires_grad=True))
        outs = (outs,) if isinstance(outs, torch.Tensor) else outs
        sum(o.sum() for o in outs).backward()
    return recorder.fw_graphs[0], recorder.bw_graphs[0]


def numbering(module, compile_with):
    """Each call_function node of the forward and backward graph: its name, target and seq_nr counted from the
    forward graph's first number (the counter is process-wide, so only the differences are the program's)."""
    fw, bw = record(module, compile_with)
    first = min(n.meta["seq_nr"] for _, n in call_function_nodes(fw) if "seq_nr" in n.meta)
    return [(graph, n.name, str(n.target), n.meta.get("seq_nr", first - 1) - first)
            for graph, gm in (("fw", fw), ("bw", bw)) for _, n in call_function_nodes(gm)]


def region(node):
    return (node.meta.get("custom") or {}).get("region")


def nodes(gm, target):
    return [n for _, n in call_function_nodes(gm) if n.target == target]


class TestStaleViewNumbering(TestCase):
    @parametrize("capture", list(CAPTURES))
    def test_an_enclosing_annotate_block_changes_no_number(self, capture):
        compile_with = CAPTURES[capture]
        release = numbering(UnannotatedUseOfStaleView(), compile_with)
        self.assertEqual(numbering(InsideAnnotate(UnannotatedUseOfStaleView()), compile_with), release)
        with annotate({"caller": 0}):
            self.assertEqual(numbering(UnannotatedUseOfStaleView(), compile_with), release)

    @parametrize("capture", list(CAPTURES))
    def test_metadata_queries_on_a_stale_view_add_no_node_and_no_number(self, capture):
        compile_with = CAPTURES[capture]
        release = numbering(MetadataOfStaleView(query=False), compile_with)
        self.assertEqual(numbering(MetadataOfStaleView(query=True), compile_with), release)
        self.assertEqual(numbering(InsideAnnotate(MetadataOfStaleView(query=True)), compile_with), release)

    @parametrize("capture", list(CAPTURES))
    def test_the_ops_own_backward_takes_the_ops_region(self, capture):
        fw, bw = record(UseOfStaleView(), CAPTURES[capture])
        (sin,) = nodes(fw, torch.ops.aten.sin.default)
        self.assertEqual(region(sin), "use")
        # sin's own backward (cos and its mul): a number no forward node has, sin's region
        (cos,) = nodes(bw, torch.ops.aten.cos.default)
        self.assertNotIn(cos.meta["seq_nr"], {n.meta.get("seq_nr") for _, n in call_function_nodes(fw)})
        own = [n for _, n in call_function_nodes(bw) if n.meta.get("seq_nr") == cos.meta["seq_nr"]]
        self.assertEqual({n.name: region(n) for n in own}, {n.name: "use" for n in own})
        # The view's backward has sin's number and pairs with sin, as on the release (README limit); the view
        # regenerated in the forward graph keeps the region it was taken in.
        (slice_backward,) = nodes(bw, torch.ops.aten.slice_backward.default)
        self.assertEqual((slice_backward.meta["seq_nr"], region(slice_backward)), (sin.meta["seq_nr"], "use"))
        regenerated = [n for n in nodes(fw, torch.ops.aten.slice.Tensor) if n.meta.get("is_functional_regenerated")]
        self.assertEqual([region(n) for n in regenerated], ["make"])

    @parametrize("capture", list(CAPTURES))
    def test_a_returned_stale_views_backward_is_numbered_in_the_backward_call(self, capture):
        """Its Nodes are made while the backward is traced, outside every block: no region (README limit)."""
        fw, bw = record(StaleViewReturned(), CAPTURES[capture])
        forward_numbers = {n.meta.get("seq_nr") for _, n in call_function_nodes(fw)}
        (slice_backward,) = nodes(bw, torch.ops.aten.slice_backward.default)
        (t,) = nodes(bw, torch.ops.aten.t.default)
        for node in (slice_backward, t):
            self.assertNotIn(node.meta["seq_nr"], forward_numbers)
            self.assertIsNone(region(node))


instantiate_parametrized_tests(TestStaleViewNumbering)


if __name__ == "__main__":
    run_tests()
