"""A view made stale by a mutation of its base gets its grad_fn rebuilt by autograd, with the view's region.

Autograd rebuilds a stale view's grad_fn lazily: inside the next op that takes the view, after that op's own
Node took its number, or in the backward call for a view returned as an output. On the pristine release (and
upstream through 2.15, pytorch issue 165810) the op's forward nodes take the rebuilt Node's number: the op's
backward pairs with no forward node, and the view's backward (slice_backward) pairs with the op and takes the
op's region instead of the view's. local-view-grad-fn-rebuild rebuilds it before the op, under the view's
annotation: each backward node carries the region of the forward op it differentiates, and no other.
"""
import os
import sys
import warnings

import torch
from torch import nn
from torch.fx.traceback import annotate
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from graph_capture import RecordGraphs, call_function_nodes, compile_with_dynamo  # noqa: E402

from functorch.compile import aot_function  # noqa: E402


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


class StaleViewUsedAfterItsBlock(nn.Module):
    """``b`` is taken in "make" and used after every block has ended: its node carries the annotation."""

    def forward(self, x):
        h = x * 2
        with annotate({"region": "make"}):
            b = h.narrow(0, 1, 2)
        h[0].add_(1)
        return b.sin()


class UnannotatedUseOfStaleView(nn.Module):
    def forward(self, x):
        h = x * 2
        b = h.narrow(0, 1, 2)
        h[0].add_(1)
        return b.sin()


def record(module, compile_with):
    recorder = RecordGraphs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_with(module, fw_compiler=recorder.fw_compiler, bw_compiler=recorder.bw_compiler)
        outs = compiled(torch.randn(4, 3, requires_grad=True))
        outs = (outs,) if isinstance(outs, torch.Tensor) else outs
        sum(o.sum() for o in outs).backward()
    return recorder.fw_graphs[0], recorder.bw_graphs[0]


def region(node):
    return (node.meta.get("custom") or {}).get("region")


def backward_nodes(bw, target):
    return [n for _, n in call_function_nodes(bw) if n.target == target]


class TestStaleViewGradFnRebuilt(TestCase):
    def check_use_of_stale_view(self, compile_with):
        fw, bw = record(UseOfStaleView(), compile_with)
        (sin,) = [n for _, n in call_function_nodes(fw) if n.target == torch.ops.aten.sin.default]
        self.assertEqual(region(sin), "use")
        # sin's backward (cos and its mul) pairs with sin itself
        (cos,) = backward_nodes(bw, torch.ops.aten.cos.default)
        self.assertEqual(cos.meta["seq_nr"], sin.meta["seq_nr"])
        paired_with_sin = [n for _, n in call_function_nodes(bw) if n.meta.get("seq_nr") == sin.meta["seq_nr"]]
        self.assertEqual({n.name: region(n) for n in paired_with_sin}, {n.name: "use" for n in paired_with_sin})
        # b's backward carries the region b was taken in
        (slice_backward,) = backward_nodes(bw, torch.ops.aten.slice_backward.default)
        self.assertEqual(region(slice_backward), "make")
        self.assertNotEqual(slice_backward.meta["seq_nr"], sin.meta["seq_nr"])

    def check_stale_view_returned(self, compile_with):
        fw, bw = record(StaleViewReturned(), compile_with)
        (slice_backward,) = backward_nodes(bw, torch.ops.aten.slice_backward.default)
        (t,) = backward_nodes(bw, torch.ops.aten.t.default)
        self.assertEqual((region(slice_backward), region(t)), ("views", "views"))

    def check_stale_view_used_after_its_block(self, compile_with):
        fw, bw = record(StaleViewUsedAfterItsBlock(), compile_with)
        (sin,) = [n for _, n in call_function_nodes(fw) if n.target == torch.ops.aten.sin.default]
        self.assertIsNone(region(sin))
        (cos,) = backward_nodes(bw, torch.ops.aten.cos.default)
        self.assertEqual(cos.meta["seq_nr"], sin.meta["seq_nr"])
        self.assertIsNone(region(cos))
        (slice_backward,) = backward_nodes(bw, torch.ops.aten.slice_backward.default)
        self.assertEqual(region(slice_backward), "make")

    def test_use_of_stale_view_aot_function(self):
        self.check_use_of_stale_view(aot_function)

    def test_use_of_stale_view_dynamo(self):
        self.check_use_of_stale_view(compile_with_dynamo)

    def test_stale_view_returned_aot_function(self):
        self.check_stale_view_returned(aot_function)

    def test_stale_view_returned_dynamo(self):
        self.check_stale_view_returned(compile_with_dynamo)

    def test_stale_view_used_after_its_block_aot_function(self):
        self.check_stale_view_used_after_its_block(aot_function)

    def test_stale_view_used_after_its_block_dynamo(self):
        self.check_stale_view_used_after_its_block(compile_with_dynamo)

    def test_a_program_that_annotates_nothing_is_numbered_as_the_release_does(self):
        """Without an annotation the grad_fn is rebuilt where autograd rebuilds it: sin's forward node takes the
        rebuilt Node's number, as slice_backward does, and sin's own backward (cos) pairs with no forward node."""
        fw, bw = record(UnannotatedUseOfStaleView(), aot_function)
        (sin,) = [n for _, n in call_function_nodes(fw) if n.target == torch.ops.aten.sin.default]
        (slice_backward,) = backward_nodes(bw, torch.ops.aten.slice_backward.default)
        self.assertEqual(slice_backward.meta["seq_nr"], sin.meta["seq_nr"])
        (cos,) = backward_nodes(bw, torch.ops.aten.cos.default)
        self.assertNotIn(cos.meta["seq_nr"], {n.meta.get("seq_nr") for _, n in call_function_nodes(fw)})
        for _, node in call_function_nodes(bw):
            self.assertIsNone(node.meta.get("custom"), node.name)

    def check_numbered_as_the_release(self, fw, bw):
        (sin,) = [n for _, n in call_function_nodes(fw) if n.target == torch.ops.aten.sin.default]
        (slice_backward,) = backward_nodes(bw, torch.ops.aten.slice_backward.default)
        self.assertEqual(slice_backward.meta["seq_nr"], sin.meta["seq_nr"])

    def test_caller_annotation_around_the_call_numbers_as_the_release(self):
        """The caller's eager block is current during the trace, but the traced code annotates nothing: the
        grad_fn is rebuilt where autograd rebuilds it."""
        with annotate({"caller": 0}):
            fw, bw = record(UnannotatedUseOfStaleView(), aot_function)
        self.check_numbered_as_the_release(fw, bw)

    def test_unannotated_view_numbered_as_the_release_beside_an_annotation(self):
        """Only the view's node and the block it is used in decide: an annotate() block elsewhere in the
        program changes nothing for it."""

        class AnnotatedElsewhere(nn.Module):
            def forward(self, x):
                with annotate({"region": "elsewhere"}):
                    x = x * 3
                return UnannotatedUseOfStaleView()(x)

        fw, bw = record(AnnotatedElsewhere(), aot_function)
        self.check_numbered_as_the_release(fw, bw)


if __name__ == "__main__":
    run_tests()
