"""Joint-graph tracing state: autograd_backward, gradient accumulation,
seq_nr pairing and annotations through aot_function and aot_export_module
(patches 180251-autograd-backward-state, local-stacktrace-hooks-reset,
local-aot-export-joint-meta, local-fwd-bw-autograd-backward)."""
import sys
import unittest
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from functorch.compile import aot_function, make_boxed_func, nop
from torch import nn
from torch._functorch._aot_autograd import logging_utils
from torch._functorch._aot_autograd.utils import copy_fwd_metadata_to_bw_nodes
from torch._functorch.aot_autograd import aot_export_module
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/graph_capture.py when run as a script

from graph_capture import meta_rows, meta_table

# torch >= 2.10 traces fewer detach nodes after relu (2.5.1: five in the joint graph)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        with fx_traceback.annotate({"region": "enc"}):
            h = self.enc(x).relu()
        # h feeds two uses: autograd accumulates its gradient
        return ((self.head(h).sum() + h.sum()),)


def capture_aot_function(model, x):
    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    params = dict(model.named_parameters())
    compiled = aot_function(lambda p, x: torch.func.functional_call(model, p, (x,)),
                            fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    compiled(params, x)[0].backward()
    return graphs["fw"], graphs["bw"]


def export_joint(model, x):
    with fx_traceback.preserve_node_meta():
        gm, _ = aot_export_module(model, (x,), trace_joint=True, output_loss_index=0)
    return gm


def one_row_per_detach_run(table):
    """The table with a run of identical detach rows shown once: releases trace a different
    number of detach ops around relu (2.5.1 five and four, 2.15 two and one)."""
    rows = []
    for row in table.splitlines():
        if not (rows and row == rows[-1] and "|aten.detach.default|" in row):
            rows.append(row)
    return "\n".join(rows)


def call_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def traced_in_backward(node):
    return node.meta.get("partitioner_tag") == "is_backward" and node.target != torch.ops.aten.ones_like.default


class TestAutogradBackwardState(TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def check_backward_flags(self, forward_nodes, backward_nodes):
        self.assertTrue(backward_nodes)
        for n in backward_nodes:
            self.assertIs(n.meta.get("autograd_backward"), True, n.format_node())
        for n in forward_nodes:
            self.assertNotIn("autograd_backward", n.meta, n.format_node())
        for n in forward_nodes + backward_nodes:
            self.assertNotIn("autograd_backward", n.meta.get("custom") or {}, n.format_node())

    def test_aot_function_flags_backward_nodes_only(self):
        fw, bw = capture_aot_function(Net(), torch.randn(2, 3))
        backward = [n for n in call_nodes(bw) if n.meta.get("partitioner_tag") == "is_backward"]
        self.check_backward_flags(call_nodes(fw), backward)
        self.assertEqual(fx_traceback.current_meta, {})

    def test_aot_function_backward_seq_nr_pairs_with_forward(self):
        fw, bw = capture_aot_function(Net(), torch.randn(2, 3))
        fw_seq = {}
        for n in call_nodes(fw):  # the first op of a seq_nr is the one autograd recorded (2.13+ adds detach ops after it)
            fw_seq.setdefault(n.meta["seq_nr"], n)
        for n in call_nodes(bw):
            self.assertIn(n.meta["seq_nr"], fw_seq, n.format_node())
        threshold = [n for n in call_nodes(bw) if n.target == torch.ops.aten.threshold_backward.default]
        self.assertEqual(fw_seq[threshold[0].meta["seq_nr"]].target, torch.ops.aten.relu.default)

    def test_gradient_accumulation_node_is_recognisable(self):
        fw, bw = capture_aot_function(Net(), torch.randn(2, 3))
        acc = [n for n in call_nodes(bw) if n.meta.get("is_gradient_acc")]
        self.assertEqual([n.target for n in acc], [torch.ops.aten.add.Tensor])
        self.assertIs(acc[0].meta["autograd_backward"], True)
        self.assertIn(fx_traceback.GRADIENT_ACC_SPECIAL_STACK, acc[0].meta["stack_trace"])

    def test_aot_export_module_joint_keeps_pairing_flags_and_custom(self):
        gm = export_joint(Net(), torch.randn(2, 3))
        nodes = call_nodes(gm)
        forward = [n for n in nodes if n.meta.get("partitioner_tag") != "is_backward"]
        backward = [n for n in nodes if traced_in_backward(n)]
        self.check_backward_flags(forward, backward)
        fw_seq = {n.meta["seq_nr"]: n for n in forward}
        unpaired = [n.format_node() for n in backward if n.meta.get("seq_nr") not in fw_seq]
        self.assertEqual(unpaired, [])
        table = meta_table(gm, base_seq_nr=min(fw_seq), columns=("SeqNr", "OrigAten", "custom", "autograd_backward"))
        self.assertExpectedInline(one_row_per_detach_run(table), """\
SeqNr|OrigAten|custom|autograd_backward
0|aten.t.default|{'region': 'enc'}|
1|aten.addmm.default|{'region': 'enc'}|
2|aten.relu.default|{'region': 'enc'}|
2|aten.detach.default|{'region': 'enc'}|
3|aten.t.default||
4|aten.addmm.default||
5|aten.sum.default||
6|aten.sum.default||
7|aten.add.Tensor||
7|aten.ones_like.default||
6|aten.expand.default||True
5|aten.expand.default||True
4|aten.t.default||True
4|aten.mm.default||True
4|aten.t.default||True
4|aten.mm.default||True
4|aten.t.default||True
4|aten.sum.dim_IntList||True
4|aten.view.default||True
7|aten.add.Tensor||True
3|aten.t.default||True
2|aten.detach.default|{'region': 'enc'}|True
2|aten.threshold_backward.default|{'region': 'enc'}|True
1|aten.t.default|{'region': 'enc'}|True
1|aten.mm.default|{'region': 'enc'}|True
1|aten.t.default|{'region': 'enc'}|True
1|aten.sum.dim_IntList|{'region': 'enc'}|True
1|aten.view.default|{'region': 'enc'}|True
0|aten.t.default|{'region': 'enc'}|True""")

    def test_ops_traced_after_a_backward_are_not_backward(self):
        # One graph holding forward, backward and what follows it (a training
        # step's update, as in a forward-loss-backward capture): leaving the last
        # grad_fn ends the backward region.
        from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks

        def step(x):
            y = x.sin()
            setup_stacktrace_preservation_hooks([y.grad_fn])
            (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
            return x - 0.1 * grad  # the update, after the backward

        with fx_traceback.preserve_node_meta():
            gm = make_fx(step)(torch.randn(3, requires_grad=True))
        flags = {n.name: n.meta.get("autograd_backward") for n in call_nodes(gm)}
        self.assertEqual(flags, {"sin": None, "ones_like": None, "cos": True, "mul": True,
                                 "mul_1": None, "sub": None})

    def test_make_fx_of_autograd_grad_marks_only_the_accumulation(self):
        # The forward traced by make_fx records no traceback, so the hooks set an empty
        # stack before each grad_fn: the accumulation stack of the grad_fn before must not stay.
        def f(x):
            y = x.sin()
            out = (y * y).cos().sum()  # y used twice: its gradients are summed
            logging_utils.setup_stacktrace_preservation_hooks([out.grad_fn])
            return torch.autograd.grad(out, x)

        with fx_traceback.preserve_node_meta():
            gm = make_fx(f)(torch.randn(3, requires_grad=True))
        acc = [n.name for n in call_nodes(gm) if n.meta.get("is_gradient_acc")]
        self.assertEqual(acc, ["add"])
        backward = [n.name for n in call_nodes(gm) if n.meta.get("autograd_backward")]
        self.assertEqual(backward, ["expand", "sin_1", "neg", "mul_1", "mul_2", "mul_3", "add", "cos_1",
                                    "mul_4"])

    def test_set_autograd_backward_nests_and_restores(self):
        # upstream's semantics (also checked against 2.13 in test/oracle/test_oracle_private_api.py):
        # enable=False leaves the enclosing state; leaving a block restores what was there
        with fx_traceback.preserve_node_meta():
            with fx_traceback._set_autograd_backward():
                self.assertIs(fx_traceback.current_meta["autograd_backward"], True)
                with fx_traceback._set_autograd_backward(False):
                    self.assertIs(fx_traceback.current_meta["autograd_backward"], True)
                self.assertIs(fx_traceback.current_meta["autograd_backward"], True)
            self.assertNotIn("autograd_backward", fx_traceback.current_meta)


class BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("backward refused")


def stack_traces_of_traced_step(step):
    """node name -> stack_trace of a make_fx trace of ``step``, whose backward runs under the stack-trace
    preservation hooks (as aot_autograd's joint trace sets them up)."""
    with fx_traceback.preserve_node_meta():
        gm = make_fx(step)(torch.randn(3, requires_grad=True))
    return {n.name: n.meta.get("stack_trace") for n in call_nodes(gm)}


def grad_step(x):
    y = x.sin()
    out = (y * y).cos().sum()  # y used twice: a "Gradient addition" node in the backward
    logging_utils.setup_stacktrace_preservation_hooks([out.grad_fn])
    (grad,) = torch.autograd.grad(out, x)
    return grad * 2  # traced after the backward


def backward_in_a_hook(grad):
    # a backward of its own (a nested graph task), run from a hook of the outer backward
    with torch.enable_grad():
        v = grad.detach().requires_grad_()
        inner = (v * v).sum()
        logging_utils.setup_stacktrace_preservation_hooks([inner.grad_fn])
        torch.autograd.grad(inner, v)
    return grad


def grad_step_with_nested_backward(x):
    y = x.sin()
    y.register_hook(backward_in_a_hook)
    out = (y * y).cos().sum()
    logging_utils.setup_stacktrace_preservation_hooks([out.grad_fn])
    (grad,) = torch.autograd.grad(out, x)
    return grad * 2  # traced after the backward


class TestNoStateLeaksBetweenCaptures(TestCase):
    def test_failed_backward_trace_does_not_change_the_next_trace(self):
        before = stack_traces_of_traced_step(grad_step)
        failing = aot_function(lambda x: BadBackward.apply(x.sin()).sum(), fw_compiler=nop, bw_compiler=nop)
        with self.assertRaisesRegex(RuntimeError, "backward refused"):
            failing(torch.randn(2, requires_grad=True))
        # the node traced after the backward gets the stack trace the callback restores (none here), not
        # the one the last backward node left ("Gradient addition node ...")
        self.assertEqual(stack_traces_of_traced_step(grad_step), before)
        self.assertIsNone(before["mul_5"])

    def test_backward_run_from_a_hook_leaves_the_outer_restore_alone(self):
        traces = stack_traces_of_traced_step(grad_step_with_nested_backward)
        last = list(traces)[-1]
        self.assertEqual(last, "mul_8")  # grad * 2, after the outer backward
        # the outer backward ends with the stack trace of before it, not with one of its own nodes'
        self.assertIsNone(traces[last])
        # and the backward nodes keep what the hooks gave them: the accumulation of y's two uses
        self.assertEqual(traces["add_1"], "Gradient addition node due to multiple use of tensor around:")

    def test_capture_twice_and_in_any_order_gives_identical_metadata(self):
        def tables(order):
            out = {}
            for name in order:
                torch.manual_seed(0)
                if name == "export":
                    gm = export_joint(Net(), torch.randn(2, 3))
                    out[name] = meta_table(gm, base_seq_nr=min(r[2] for r in meta_rows(gm)))
                else:
                    fw, bw = capture_aot_function(Net(), torch.randn(2, 3))
                    base = min(r[2] for r in meta_rows(fw))
                    out[name] = meta_table(fw, base) + "\n" + meta_table(bw, base)
            return out

        first = tables(["export", "aot_function"])
        second = tables(["aot_function", "export"])
        self.assertEqual(first, second)


class TestFwBwCopyWithoutPartitionerTags(TestCase):
    def test_autograd_backward_nodes_without_tag_get_forward_custom(self):
        # A backward traced by hand under the stack-trace hooks: its nodes carry
        # autograd_backward and the forward seq_nr, but no partitioner tag.
        def f(x):
            with fx_traceback.annotate({"region": "r"}):
                y = x.sin()
            out = y.sum()
            logging_utils.setup_stacktrace_preservation_hooks([out.grad_fn])
            return torch.autograd.grad(out, x)

        with fx_traceback.preserve_node_meta():
            gm = make_fx(f)(torch.randn(3, requires_grad=True))
        copy_fwd_metadata_to_bw_nodes(gm)
        by_target = {n.target: n for n in call_nodes(gm)}
        sin = by_target[torch.ops.aten.sin.default]
        cos = by_target[torch.ops.aten.cos.default]
        self.assertNotIn("autograd_backward", sin.meta)
        self.assertIs(cos.meta.get("autograd_backward"), True)
        self.assertNotIn("partitioner_tag", cos.meta)
        self.assertEqual(cos.meta["seq_nr"], sin.meta["seq_nr"])
        self.assertEqual(cos.meta.get("custom"), {"region": "r"})
        self.assertEqual(sin.meta.get("custom"), {"region": "r"})


if __name__ == "__main__":
    run_tests()
