"""Forward annotations reach the backward graph AOTAutograd hands to bw_compiler.

Backports upstream PRs 164174 and 165202: after the joint graph is traced (and
before dead-code elimination) each backward node gets the metadata of the
forward node with its seq_nr: ``custom`` merged into its own with the forward
keys winning, ``fwd_nn_module_stack`` and ``fwd_source_fn_stack``. Backward
nodes are recognised by the backward tag, not by a missing nn_module_stack
(functional ops like ``torch.relu`` have none in the forward either), and the
search spans every subgraph (flex_attention's score/mask graphs).

Most programs are traced with ``aot_function`` / ``aot_module``; checkpoint's
``tag_activation_checkpoint`` only exists under Dynamo, so those run under
``torch.compile`` with ``annotate`` in the compiled function.
"""
import copy
import functools
import os
import sys
import threading
import unittest
import warnings
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.fx.traceback import annotate
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flex_support import FLEX_DEVICE, skip_if_flex_backward_refused  # noqa: E402
from graph_capture import RecordGraphs, call_function_nodes, compile_with_dynamo, graph_modules  # noqa: E402

from functorch.compile import aot_function, aot_module  # noqa: E402

def is_backward(node):
    """Traced by autograd's backward (it differentiates a forward op, or
    accumulates gradients), as opposed to a forward op the partitioner
    recomputes or moves into the backward graph."""
    return node.meta.get("partitioner_tag") == "is_backward"


def is_gradient_accumulation(node):
    return bool(node.meta.get("is_gradient_acc"))


def op(node):
    return str(node.target)


def region(node):
    custom = node.meta.get("custom")
    return None if custom is None else custom.get("region")


def record(fn, *args, compile_with=aot_function):
    """Run fn forward and backward under AOTAutograd; the recorded graphs."""
    recorder = RecordGraphs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_with(fn, fw_compiler=recorder.fw_compiler, bw_compiler=recorder.bw_compiler)
        out = compiled(*args)
        (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    assert len(recorder.fw_graphs) == 1 and len(recorder.bw_graphs) == 1
    return recorder.fw_graphs[0], recorder.bw_graphs[0]



def bw_ops(bw_graph):
    """Backward nodes of the bw graph (all subgraphs) except gradient accumulation."""
    return [(sub, n) for sub, n in call_function_nodes(bw_graph) if is_backward(n) and not is_gradient_accumulation(n)]


class AnnotationTestCase(TestCase):
    def assertFlagsSane(self, fw_graph, bw_graph):
        """As upstream 2.13: every op of the bw graph carries autograd_backward,
        forward ops recomputed there included, and so does every backward op of
        its subgraphs; no other node does, and it never sits in custom.

        (The partitioner may move cheap backward ops, such as a weight's
        transpose, into the forward graph; they stay backward nodes.)"""
        for sub, n in call_function_nodes(bw_graph):
            if not sub or is_backward(n):
                self.assertIs(n.meta.get("autograd_backward"), True, (sub, n.name))
        for graph in (fw_graph, bw_graph):
            for sub, n in call_function_nodes(graph):
                self.assertNotIn("autograd_backward", n.meta.get("custom") or {}, (sub, n.name))
                if not is_backward(n) and (graph is fw_graph or sub):
                    self.assertIsNone(n.meta.get("autograd_backward"), (sub, n.name))

    def assertRegions(self, graph_nodes, expected):
        """``expected``: {op substring: [regions of the matching nodes, in graph order]}."""
        for fragment, regions in expected.items():
            got = [region(n) for _, n in graph_nodes if fragment in op(n)]
            self.assertEqual(got, regions, fragment)

    def assertNotShared(self, graphs, user_dicts):
        """The copy rule of fx.traceback.annotate: no node holds a user's dict,
        and no two nodes share a custom dict (values may be shared)."""
        seen = {}
        user_ids = {id(d) for d in user_dicts}
        for graph in graphs:
            for sub, n in call_function_nodes(graph):
                custom = n.meta.get("custom")
                if custom is None:
                    continue
                self.assertNotIn(id(custom), user_ids, (sub, n.name))
                self.assertNotIn(id(custom), seen, (sub, n.name, seen.get(id(custom))))
                seen[id(custom)] = (sub, n.name)


class TestFunctionalMLP(AnnotationTestCase):
    def test_functional_activations_annotate_their_backward(self):
        l1 = {"region": "l1", "tags": ["x"]}
        l2 = {"region": "l2"}
        loss = {"region": "loss"}
        snapshot = copy.deepcopy([l1, l2, loss])

        def mlp(x, w1, b1, w2, b2):
            with annotate(l1):
                h = torch.relu(x @ w1 + b1)
            with annotate(l2):
                y = F.gelu(h @ w2 + b2)
            with annotate(loss):  # h used twice: its gradients are accumulated
                return y + h

        torch.manual_seed(0)
        args = [torch.randn(4, 6, requires_grad=True), torch.randn(6, 6, requires_grad=True),
                torch.randn(6, requires_grad=True), torch.randn(6, 6, requires_grad=True),
                torch.randn(6, requires_grad=True)]
        fw, bw = record(mlp, *args)

        fw_nodes = list(call_function_nodes(fw))
        self.assertRegions(fw_nodes, {"aten.mm": ["l1", "l2"], "aten.relu": ["l1"], "aten.gelu": ["l2"]})
        ops = bw_ops(bw)
        self.assertRegions(ops, {"threshold_backward": ["l1"], "gelu_backward": ["l2"]})
        self.assertEqual(Counter(region(n) for _, n in ops if op(n) == "aten.mm.default"), {"l1": 2, "l2": 2})
        # Every backward op stems from an annotated forward op.
        self.assertEqual([n.name for _, n in ops if region(n) is None], [])
        for _, n in ops:
            if region(n) == "l1":
                self.assertEqual(n.meta["custom"], {"region": "l1", "tags": ["x"]})
            # the forward node had no nn_module_stack; the copy still ran and says so
            self.assertIn("fwd_nn_module_stack", n.meta, n.name)

        # Gradient accumulation belongs to no forward op: its seq_nr is the last
        # forward op's (the annotated loss add) but it must not take its annotation.
        acc = [n for _, n in call_function_nodes(bw) if is_gradient_accumulation(n)]
        self.assertTrue(acc)
        for n in acc:
            self.assertIsNone(n.meta.get("custom"), n.name)
            self.assertNotIn("fwd_source_fn_stack", n.meta, n.name)

        self.assertFlagsSane(fw, bw)
        self.assertNotShared([fw, bw], [l1, l2, loss])
        self.assertEqual([l1, l2, loss], snapshot)

    def test_backward_keys_survive_and_forward_keys_win(self):
        fw_annotation = {"region": "scale", "shared": "fw"}
        bw_annotation = {"shared": "bw", "bw_only": 1}
        snapshot = copy.deepcopy([fw_annotation, bw_annotation])

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 3

            @staticmethod
            def backward(ctx, grad):
                with annotate(bw_annotation):
                    return grad * 3

        def fn(x):
            with annotate(fw_annotation):
                y = Scale.apply(x)
            return y.cos()

        fw, bw = record(fn, torch.randn(5, requires_grad=True))
        muls = [n for _, n in bw_ops(bw) if op(n) == "aten.mul.Tensor" and n.meta.get("custom", {}).get("bw_only")]
        self.assertEqual(len(muls), 1)
        self.assertEqual(muls[0].meta["custom"], {"shared": "fw", "bw_only": 1, "region": "scale"})
        self.assertFlagsSane(fw, bw)
        self.assertNotShared([fw, bw], [fw_annotation, bw_annotation])
        self.assertEqual([fw_annotation, bw_annotation], snapshot)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.conv_annotation = {"region": "conv"}
        self.bn_annotation = {"region": "bn"}

    def forward(self, x):
        with annotate(self.conv_annotation):
            x = self.conv(x)
        with annotate(self.bn_annotation):
            x = self.bn(x)
        return F.relu(x)


class Block(nn.Module):
    """Pre-norm transformer block: annotated attention (SDPA) and MLP, residuals outside."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.attn_annotation = {"region": "attn"}
        self.mlp_annotation = {"region": "mlp"}

    def forward(self, x):
        b, s, d = x.shape
        with annotate(self.attn_annotation):
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = self.proj(a.transpose(1, 2).reshape(b, s, d))
        x = x + a
        with annotate(self.mlp_annotation):
            m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + m


class TestModules(AnnotationTestCase):
    def test_conv_bn(self):
        torch.manual_seed(0)
        model = ConvBN()
        fw, bw = record(model, torch.randn(2, 2, 6, 6), compile_with=aot_module)
        self.assertRegions(list(call_function_nodes(fw)), {
            "aten.convolution.default": ["conv"], "batch_norm": ["bn"], "aten.relu": [None]})
        ops = bw_ops(bw)
        self.assertRegions(ops, {
            "convolution_backward": ["conv"], "batch_norm_backward": ["bn"], "threshold_backward": [None]})
        self.assertFlagsSane(fw, bw)
        self.assertNotShared([fw, bw], [model.conv_annotation, model.bn_annotation])
        self.assertEqual((model.conv_annotation, model.bn_annotation), ({"region": "conv"}, {"region": "bn"}))

    def test_transformer_block_with_sdpa(self):
        torch.manual_seed(0)
        model = Block()
        fw, bw = record(model, torch.randn(2, 4, 8, requires_grad=True), compile_with=aot_module)
        ops = bw_ops(bw)
        sdpa_bw = [n for _, n in ops if "scaled_dot_product" in op(n) and "backward" in op(n)]
        self.assertTrue(sdpa_bw)
        self.assertEqual({region(n) for n in sdpa_bw}, {"attn"})
        self.assertRegions(ops, {"native_layer_norm_backward": ["mlp", "attn"], "gelu_backward": ["mlp"]})
        self.assertEqual(Counter(region(n) for _, n in ops if op(n) == "aten.mm.default"), {"attn": 4, "mlp": 4})
        acc = [n for _, n in call_function_nodes(bw) if is_gradient_accumulation(n)]
        self.assertTrue(acc)
        self.assertEqual([n.meta.get("custom") for n in acc], [None] * len(acc))
        self.assertFlagsSane(fw, bw)
        self.assertNotShared([fw, bw], [model.attn_annotation, model.mlp_annotation])
        self.assertEqual((model.attn_annotation, model.mlp_annotation), ({"region": "attn"}, {"region": "mlp"}))


class TestFlexAttention(AnnotationTestCase):
    @skip_if_flex_backward_refused
    # 2.10's FakeTensorMode refuses the real block-mask tensors this direct HOP call passes under
    # aot_function (vanilla 2.10 fails the same way); test_demo covers flex there under torch.compile.
    @unittest.skipIf(torch.__version__.startswith("2.10."), "torch 2.10 refuses real block-mask tensors here")
    def test_every_backward_subgraph_node_is_annotated(self):
        from torch._higher_order_ops.flex_attention import flex_attention as flex_attention_hop
        from torch.nn.attention.flex_attention import create_block_mask

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + (q_idx - kv_idx)

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        B, H, S, D = 1, 2, 128, 8
        block_mask = create_block_mask(causal, B, H, S, S, device=FLEX_DEVICE)
        user = {"ac_region_id": 0}

        # 2.8 fake-tensorizes only the traced function's inputs and refuses a real tensor
        # closed over (2.5.1 accepted it): the block mask's tensors are passed in as inputs.
        mask = block_mask.as_tuple()
        mask_tensors = [x for x in mask if isinstance(x, torch.Tensor)]

        def attention(q, k, v, *mask_inputs):
            inputs = iter(mask_inputs)
            mask_in = tuple(next(inputs) if isinstance(x, torch.Tensor) else x for x in mask)
            with annotate(user):
                # [0]: 2.9's HOP returns (out, logsumexp, max_scores), earlier ones (out, logsumexp)
                out = flex_attention_hop(q, k, v, score_mod, mask_in, D ** -0.5, {})[0]
            return out

        torch.manual_seed(0)
        qkv = [torch.randn(B, H, S, D, device=FLEX_DEVICE, requires_grad=True) for _ in range(3)]
        fw, bw = record(attention, *qkv, *mask_tensors)

        flex = [n for _, n in call_function_nodes(fw) if op(n) == "flex_attention"]
        self.assertEqual(len(flex), 1)
        self.assertEqual(flex[0].meta["custom"], {"ac_region_id": 0})
        self.assertIsNone(flex[0].meta.get("autograd_backward"))
        fw_subgraph_nodes = [n for sub, n in call_function_nodes(fw) if sub]
        self.assertTrue(fw_subgraph_nodes)
        self.assertEqual({str(n.meta.get("custom")) for n in fw_subgraph_nodes}, {"{'ac_region_id': 0}"})

        # 2.6 numbers the subgraphs (fw_graph0; 2.5.1: fw_graph); from 2.8 this score_mod's joint graph holds no op
        bw_subgraphs = {sub.rstrip("0123456789") for sub, _ in graph_modules(bw) if sub}
        self.assertEqual(bw_subgraphs, {"fw_graph", "joint_graph", "mask_graph"})
        nodes = list(call_function_nodes(bw))
        self.assertEqual([op(n) for _, n in nodes if op(n) == "flex_attention_backward"], ["flex_attention_backward"])
        for sub, n in nodes:
            if sub or op(n) == "flex_attention_backward":
                self.assertEqual(n.meta.get("custom"), {"ac_region_id": 0}, (sub, n.name))
        self.assertFlagsSane(fw, bw)
        self.assertNotShared([fw, bw], [user])
        self.assertEqual(user, {"ac_region_id": 0})


def block(x, w):
    return torch.sigmoid(torch.relu(x @ w)) * 2


def save_mm_only(ctx, op_, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op_ == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


class TestActivationCheckpointing(AnnotationTestCase):
    def inputs(self):
        torch.manual_seed(0)
        return torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)

    def check(self, fw, bw, expect_recompute):
        self.assertRegions(list(call_function_nodes(fw)), {"aten.relu": ["ckpt"], "aten.sigmoid.": ["ckpt"]})
        ops = bw_ops(bw)
        self.assertRegions(ops, {"threshold_backward": ["ckpt"], "sigmoid_backward": ["ckpt"]})
        self.assertEqual(Counter(region(n) for _, n in ops if op(n) == "aten.mm.default"), {"ckpt": 2, None: 2})
        recomputed = [n for _, n in call_function_nodes(bw) if not is_backward(n) and op(n) in (
            "aten.relu.default", "aten.sigmoid.default")]
        if expect_recompute:
            self.assertTrue(recomputed)
        for n in recomputed:
            self.assertEqual(region(n), "ckpt", n.name)
            # it runs in the backward: marked like every bw-graph op (upstream 2.13)
            self.assertIs(n.meta.get("autograd_backward"), True, n.name)
        self.assertFlagsSane(fw, bw)

    def test_non_reentrant_under_aot_function(self):
        from torch.utils.checkpoint import checkpoint

        user = {"region": "ckpt"}

        def fn(x, w, w2):
            with annotate(user):
                h = checkpoint(block, x, w, use_reentrant=False)
            return h @ w2

        fw, bw = record(fn, *self.inputs())
        self.check(fw, bw, expect_recompute=False)
        self.assertNotShared([fw, bw], [user])
        self.assertEqual(user, {"region": "ckpt"})

    def compile_checkpointed(self, checkpointed, annotation, **checkpoint_kwargs):
        """Run ``checkpointed`` under torch.utils.checkpoint inside annotate(annotation), compiled
        (fullgraph) with recording AOT compilers, forward and backward; the recorder."""
        from torch.utils.checkpoint import checkpoint

        def fn(x, w, w2):
            with annotate(annotation):
                h = checkpoint(checkpointed, x, w, **checkpoint_kwargs)
            return (h @ w2).sum()

        recorder = RecordGraphs()
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(fn, backend=recorder.backend, fullgraph=True)(*self.inputs()).backward()
        return recorder

    def run_dynamo(self, **checkpoint_kwargs):
        """Checkpoint as Dynamo's tag_activation_checkpoint HOP: annotate runs under Dynamo
        (patch 164678), so the HOP node and its body carry the region into AOTAutograd."""
        user = {"region": "ckpt"}
        recorder = self.compile_checkpointed(block, user, **checkpoint_kwargs)
        self.assertEqual((len(recorder.fw_graphs), len(recorder.bw_graphs)), (1, 1))
        self.check(recorder.fw_graphs[0], recorder.bw_graphs[0], expect_recompute=True)
        self.assertNotShared(recorder.fw_graphs + recorder.bw_graphs, [user])
        self.assertEqual(user, {"region": "ckpt"})

    def test_non_reentrant_under_dynamo(self):
        self.run_dynamo(use_reentrant=False)

    def test_dropout_output_keeps_its_annotation(self):
        """The partitioner replaces a recomputed dropout in the forward graph by
        run_and_save_rng_state and getitems of the rng state and of the op's output;
        the output keeps the dropout's annotation and seq_nr (upstream 2.9+), the rng
        state and the wrapper get none, as upstream."""
        def dropout_block(x, w):
            return F.dropout(x @ w, p=0.5, training=True).relu()

        recorder = self.compile_checkpointed(dropout_block, {"region": "ckpt"}, use_reentrant=False)
        (fw,) = recorder.fw_graphs
        (wrapper,) = [n for _, n in call_function_nodes(fw) if "run_and_save_rng_state" in str(n.target)]
        state, output = sorted(wrapper.users, key=lambda n: n.args[1])
        self.assertEqual([state.args[1], output.args[1]], [0, 1])
        self.assertIsNone(region(wrapper))
        self.assertIsNone(region(state))
        self.assertEqual(region(output), "ckpt")
        (relu,) = [n for _, n in call_function_nodes(fw) if op(n) == "aten.relu.default"]
        self.assertEqual(output.meta["seq_nr"], relu.meta["seq_nr"] - 1)

    def test_reentrant_under_dynamo(self):
        self.run_dynamo(use_reentrant=True)

    def test_selective_checkpointing_under_dynamo(self):
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        self.run_dynamo(use_reentrant=False,
                        context_fn=functools.partial(create_selective_checkpoint_contexts, save_mm_only))


class TestViewReplay(AnnotationTestCase):
    """A view functionalization regenerates after a mutation keeps the seq_nr,
    stack trace and annotation of the original view op, not those of the op
    that uses it next (166200-view-replay-annotation)."""

    def test_regenerated_view_keeps_its_seq_nr_and_annotation(self):
        class Unpermute(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("idx", torch.tensor([2, 0, 3, 1]))

            def forward(self, x):
                with annotate({"pp_stage": 0}):
                    out = x.new_empty((5, 3))
                    out[self.idx, :] = x
                    out = out[:-1]
                return out.cos()  # outside the block: the first use of the stale view

        fw, bw = record(Unpermute(), torch.randn(4, 3, requires_grad=True), compile_with=compile_with_dynamo)
        regenerated = [n for _, n in call_function_nodes(fw) if n.meta.get("is_functional_regenerated")]
        self.assertEqual([op(n) for n in regenerated], ["aten.slice.Tensor"])
        (view,) = regenerated
        self.assertEqual(view.meta["custom"], {"pp_stage": 0})
        self.assertIn("out = out[:-1]", view.meta["stack_trace"])
        (slice_backward,) = [n for _, n in call_function_nodes(bw) if op(n) == "aten.slice_backward.default"]
        self.assertEqual(slice_backward.meta["seq_nr"], view.meta["seq_nr"])
        self.assertEqual(slice_backward.meta["custom"], {"pp_stage": 0})
        (cos,) = [n for _, n in call_function_nodes(fw) if op(n) == "aten.cos.default"]
        self.assertIsNone(cos.meta.get("custom"))
        self.assertNotEqual(cos.meta["seq_nr"], view.meta["seq_nr"])
        (index_put,) = [n for _, n in call_function_nodes(fw) if op(n) == "aten.index_put.default"]
        self.assertEqual(index_put.meta["custom"], {"pp_stage": 0})
        # Before 2.13 the C++ indexing writes through a full-slice view, so autograd wraps
        # IndexPutBackward in CopySlices, numbered after index_put's forward node
        # (local-bw-seq-nr-ranges annotates its backward all the same).
        (index,) = [n for _, n in call_function_nodes(bw) if op(n) == "aten.index.Tensor"]
        self.assertEqual(index.meta["custom"], {"pp_stage": 0})
        self.assertFlagsSane(fw, bw)


class TestInplaceOnView(AnnotationTestCase):
    """Autograd records an in-place op on a view as a CopySlices node wrapping the
    op's own grad_fn, made after the op's forward nodes: the backward ops traced
    under it have a seq_nr no forward node has, and still carry the annotation
    and source of the op (local-bw-seq-nr-ranges). Upstream (through 2.15)
    leaves them unannotated."""

    def check_inplace_regions(self, fw, bw, forward_ops):
        """``forward_ops``: {in-place op's functional target: (its region, an op its
        backward traces)}. The backward ops traced under the autograd Nodes made
        from that op's forward node up to the next forward node include that op
        and carry the region and source; every backward op that pairs with no
        forward node belongs to one of the in-place ops."""
        fw_nodes = [n for _, n in call_function_nodes(fw)]
        forward_seq_nrs = sorted({n.meta["seq_nr"] for n in fw_nodes})
        ops = bw_ops(bw)
        owned = set()
        for target, (expected_region, derivative) in forward_ops.items():
            (forward,) = [n for n in fw_nodes if op(n) == target]
            self.assertEqual(region(forward), expected_region)
            first = forward.meta["seq_nr"]
            following = [nr for nr in forward_seq_nrs if nr > first]
            stop = following[0] if following else float("inf")
            paired = [n for _, n in ops if first <= n.meta["seq_nr"] < stop]
            self.assertIn(derivative, [op(n) for n in paired])
            # the pristine numbering: CopySlices' backward keeps a number of its own
            self.assertTrue(any(n.meta["seq_nr"] != first for n in paired), [n.name for n in paired])
            self.assertEqual({n.name: region(n) for n in paired}, {n.name: expected_region for n in paired})
            for n in paired:
                self.assertEqual(n.meta.get("fwd_source_fn_stack"), forward.meta.get("source_fn_stack"), n.name)
                if n.meta["seq_nr"] not in forward_seq_nrs:
                    # given the annotation current when its Node was numbered: a key nothing current had (no
                    # module or source stack under aot_function) stays absent, as on a node that pairs with nothing
                    for key in ("nn_module_stack", "source_fn_stack"):
                        if forward.meta.get(key) is None:
                            self.assertNotIn("fwd_" + key, n.meta, n.name)
            owned.update(n.name for n in paired)
        unpaired = [n.name for _, n in ops if n.meta["seq_nr"] not in forward_seq_nrs]
        self.assertEqual([name for name in unpaired if name not in owned], [])
        self.assertFlagsSane(fw, bw)

    def test_inplace_ops_on_views_pair_with_their_forward_ops(self):
        def f(x, w):
            y = x.clone()
            with annotate({"region": "scale"}):
                y[1:].mul_(w)
            with annotate({"region": "shift"}):
                y[:, :2].add_(x[:, 1:])
            return y.cos()

        fw, bw = record(f, torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
        # add_'s own derivative is the identity: its backward is CopySlices' write-back
        self.check_inplace_regions(fw, bw, {"aten.mul.Tensor": ("scale", "aten.mul.Tensor"),
                                            "aten.add.Tensor": ("shift", "aten.slice_scatter.default")})

    def test_inplace_copy_into_a_view_under_dynamo(self):
        class Scatter(nn.Module):
            def forward(self, x):
                y = x * 1
                with annotate({"region": "scatter"}):
                    y[:, 1].copy_(x[:, 0].sin())
                return y.cos()

        fw, bw = record(Scatter(), torch.randn(4, 3, requires_grad=True), compile_with=compile_with_dynamo)
        # copy_'s derivative for the overwritten view is zeros
        self.check_inplace_regions(fw, bw, {"aten.copy.default": ("scatter", "aten.zeros_like.default")})

    def test_nested_recording_leaves_no_gap_in_the_outer_one(self):
        """A graph traced while another one is records its own seq_nr map; the
        outer map also knows the annotation current while the nested trace
        ran (each change is noted in every recording under way)."""
        import torch.fx.traceback as fx_traceback

        x = torch.ones(2, requires_grad=True)
        record_map = fx_traceback._record_seq_nr_annotations
        with record_map() as outer:
            with annotate({"region": "outer"}):
                with record_map() as nested:
                    with annotate({"region": "nested"}):
                        in_nested = (x * 2).grad_fn._sequence_nr()
                after_nested = (x * 3).grad_fn._sequence_nr()
        self.assertEqual(nested.meta_at(in_nested)["custom"], {"region": "nested"})
        self.assertEqual(outer.meta_at(in_nested)["custom"], {"region": "nested"})
        self.assertEqual(outer.meta_at(after_nested)["custom"], {"region": "outer"})


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad


def nll_applying_identities(count):
    """An NLL autograd.Function whose forward applies the identity Function ``count``
    times to the target, as DTensor's loss_parallel NLL handler applies
    DTensor.from_local: each application makes an autograd Node after the NLL's
    own, so the NLL's forward nodes take a later number than its backward."""

    class NLL(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logp, target):
            for _ in range(count):
                target = _Identity.apply(target)
            ctx.save_for_backward(target)
            ctx.rows, ctx.classes = logp.shape
            return -logp.gather(1, target[:, None]).mean()

        @staticmethod
        def backward(ctx, grad):
            (target,) = ctx.saved_tensors
            onehot = torch.zeros(ctx.rows, ctx.classes).scatter(1, target[:, None], -1.0 / ctx.rows)
            return onehot * grad, None

    return NLL


def run_in_another_thread(target, *args):
    """Runs target(*args) in a thread of its own and waits for it. An exception there is raised here, and a
    thread still running after a minute fails the caller: a worker that died before its annotate() block
    would otherwise leave a thread test passing without having run what it tests."""
    errors = []

    def run():
        try:
            target(*args)
        except BaseException as e:  # handed to the caller's thread
            errors.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():
        raise AssertionError(f"{target.__name__} still runs in its thread after 60 s")
    if errors:
        raise errors[0]


class TestSeqNrRecordingThreads(AnnotationTestCase):
    """The seq_nr -> annotation recordings are per thread (local-bw-seq-nr-ranges), as autograd's numbering is.
    Two joint graphs are not traced in two threads at the same moment (make_fx's and preserve_node_meta's state
    is one for the process), so what thread isolation means is what these programs do: another thread's
    annotate() blocks during this thread's trace, and a joint graph traced in another thread while this
    thread's trace waits on it."""

    check_inplace_regions = TestInplaceOnView.check_inplace_regions

    def test_annotate_blocks_of_another_thread_leave_the_seq_nr_map_alone(self):
        """Autograd numbers its Nodes per thread, and so are the recordings:
        a block that another thread enters and leaves during the trace, with
        that thread's own numbers past the tracing thread's, adds nothing to
        this thread's map (unsorted, it would send the lookup astray): the
        in-place op's backward still takes its region."""
        from torch._C._autograd import _get_sequence_nr

        def annotate_in_another_thread(tracing_threads_next_number):
            t = torch.ones(1, requires_grad=True)
            while _get_sequence_nr() <= tracing_threads_next_number + 8:
                t * 1  # an autograd Node: this thread's own counter moves on
            for _ in range(8):
                with annotate({"region": "other thread"}):
                    t * 1

        def f(x, w):
            y = x.clone()
            run_in_another_thread(annotate_in_another_thread, _get_sequence_nr())
            with annotate({"region": "scale"}):
                y[1:].mul_(w)
            return y.cos()

        fw, bw = record(f, torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
        self.check_inplace_regions(fw, bw, {"aten.mul.Tensor": ("scale", "aten.mul.Tensor")})

    def test_annotate_block_of_another_thread_inside_this_threads_block(self):
        """The same inside this thread's block, before the in-place op: another thread (its own count of Nodes
        still at its start, below this thread's) enters and leaves a block; this thread's map still gives the
        in-place op's backward its region (an entry at that thread's number would send the lookup astray)."""

        def annotate_in_another_thread():
            with annotate({"region": "other thread"}):
                pass

        def f(x, w):
            y = x.clone()
            with annotate({"region": "scale"}):
                run_in_another_thread(annotate_in_another_thread)
                y[1:].mul_(w)
            return y.cos()

        fw, bw = record(f, torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
        self.check_inplace_regions(fw, bw, {"aten.mul.Tensor": ("scale", "aten.mul.Tensor")})

    def test_trace_in_another_thread_at_this_threads_sequence_number(self):
        """Another thread traces an annotate() block of its own (make_fx) while this thread's joint trace waits
        inside its block, that thread's next autograd number being this thread's: the other thread's notes stay
        in its own (empty) chain, so this thread's block still holds the number its NLL Function's Node takes,
        and the NLL's backward its region."""
        from torch._C._autograd import _get_sequence_nr
        from torch.fx.experimental.proxy_tensor import make_fx

        nll = nll_applying_identities(1)

        def other_thread_traces(this_threads_next_number):
            t = torch.ones(1, requires_grad=True)
            while _get_sequence_nr() < this_threads_next_number:
                t * 1  # an autograd Node: this thread's own counter moves on

            def traced(y):
                with annotate({"module_fqn": "other thread"}):
                    return y + 1

            make_fx(traced)(torch.ones(1))

        def f(x, target):
            with annotate({"module_fqn": "loss"}):
                if get_proxy_mode() is not None:  # the joint graph's trace
                    run_in_another_thread(other_thread_traces, _get_sequence_nr())
                return nll.apply(torch.log_softmax(x, 1), target)

        fw, bw = record(f, torch.randn(3, 5, requires_grad=True), torch.tensor([0, 2, 4]))
        (scatter,) = [n for _, n in call_function_nodes(bw) if op(n) == "aten.scatter.value"]
        self.assertEqual(scatter.meta.get("custom"), {"module_fqn": "loss"})

    def test_graph_traced_in_another_thread_while_this_one_waits(self):
        """Each graph's in-place op's backward carries its own program's region. The programs annotate
        distinct keys, and each graph is checked for its own program's keys only: current_meta is one for the
        process (as on the release and upstream), so what this thread's open block ("outer") adds to the other
        thread's nodes is left unasserted (a thread-local current_meta would drop it); nothing of the other
        thread's ("nested") reaches this thread's graphs."""

        def nested(x, w):
            with annotate({"nested": 1}):
                y = x.clone()
                with annotate({"region": "scale"}):
                    y[1:].mul_(w)
                return y.cos()

        nested_graphs = []

        def trace_nested():
            nested_graphs.append(record(nested, torch.randn(4, 3, requires_grad=True), torch.randn(3, 3)))

        def f(x, w):
            with annotate({"outer": 1}):
                if get_proxy_mode() is not None:  # the joint graph's trace, not the metadata pass before it
                    run_in_another_thread(trace_nested)
                y = x + 5
            with annotate({"region": "scale"}):
                y[1:].mul_(w)
            return y.cos()

        fw, bw = record(f, torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True))
        self.check_inplace_regions(fw, bw, {"aten.mul.Tensor": ("scale", "aten.mul.Tensor")})
        ((nested_fw, nested_bw),) = nested_graphs
        self.check_inplace_regions(nested_fw, nested_bw, {"aten.mul.Tensor": ("scale", "aten.mul.Tensor")})
        customs = {g: [n.meta.get("custom") for _, n in call_function_nodes(gm)]
                   for g, gm in (("fw", fw), ("bw", bw), ("nested_fw", nested_fw), ("nested_bw", nested_bw))}

        def own(custom):  # the keys the other thread's program annotates
            return {k: v for k, v in (custom or {}).items() if k in ("nested", "region")}

        for g in ("nested_fw", "nested_bw"):
            self.assertIn({"nested": 1, "region": "scale"}, [own(c) for c in customs[g]], g)
            self.assertTrue(all(own(c).get("nested") == 1 for c in customs[g]), g)
        self.assertIn({"outer": 1}, customs["fw"])  # x + 5
        for g in ("fw", "bw"):
            self.assertFalse(any(c and "nested" in c for c in customs[g]), g)


class TestFunctionInsideFunction(AnnotationTestCase):
    """A custom Function whose forward applies another Function: its backward is
    traced under a Node whose number no forward node has, and carries the
    annotation current when autograd made that Node (local-bw-seq-nr-ranges).
    Upstream (through 2.15) leaves the whole NLL backward unannotated."""

    def run_loss(self, count, compile_with):
        nll = nll_applying_identities(count)

        def f(x, target):
            h = x * 2  # outside any region
            with annotate({"module_fqn": "head"}):
                logp = torch.log_softmax(h, 1)
            with annotate({"module_fqn": "loss"}):
                return nll.apply(logp, target)

        fw, bw = record(f, torch.randn(3, 5, requires_grad=True), torch.tensor([0, 2, 4]),
                        compile_with=compile_with)
        def forward_seq_nr(target):
            (node,) = [n for _, n in call_function_nodes(fw) if op(n) == target]
            return node.meta["seq_nr"]

        expected_by_seq_nr = {forward_seq_nr("aten.mul.Tensor"): None,  # x * 2
                              forward_seq_nr("aten._log_softmax.default"): "head"}
        got, expected, nll_ops = {}, {}, []
        # Under Dynamo (seen on 2.13) the NLL's backward is the autograd_function_apply's
        # backward graph, inlined without the partitioner's is_backward tag.
        for _, n in call_function_nodes(bw):
            if is_gradient_accumulation(n):
                continue
            got[n.name] = (n.meta.get("custom") or {}).get("module_fqn")
            expected[n.name] = expected_by_seq_nr.get(n.meta["seq_nr"], "loss")
            if expected[n.name] == "loss":
                nll_ops.append(op(n))
        self.assertIn("aten.scatter.value", nll_ops)
        self.assertEqual(got, expected)
        self.assertFlagsSane(fw, bw)

    def test_one_function_inside_under_aot_function(self):
        self.run_loss(1, aot_function)

    def test_two_functions_inside_under_aot_function(self):
        self.run_loss(2, aot_function)

    def test_one_function_inside_under_dynamo(self):
        self.run_loss(1, compile_with_dynamo)

    def test_two_functions_inside_under_dynamo(self):
        self.run_loss(2, compile_with_dynamo)


class TestCond(AnnotationTestCase):
    """The backward cond of a cond traced inside annotate carries the region (issue 20 item 9). Its seq_nr is the
    cond's autograd Node's; before 2.13 the forward cond node takes a later number (the branches are traced
    inside the Function's forward), and local-bw-seq-nr-ranges gives it the annotation current when that Node
    was made."""

    def test_backward_cond_and_its_outputs_carry_the_region(self):
        from torch._higher_order_ops.cond import cond

        def fn(x, w):
            with annotate({"region": "cond"}):
                y = cond(x.sum() > 0, lambda a: (a @ w).sin(), lambda a: (a @ w).cos(), (x,))
            return y.sum()

        torch.manual_seed(0)
        fw, bw = record(fn, torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True),
                        compile_with=compile_with_dynamo)
        fw_cond = [n for n in fw.graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.cond]
        bw_cond = [n for n in bw.graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.cond]
        self.assertEqual((len(fw_cond), len(bw_cond)), (1, 1))
        self.assertEqual(region(fw_cond[0]), "cond")
        self.assertEqual(region(bw_cond[0]), "cond")
        self.assertEqual([region(u) for u in bw_cond[0].users], ["cond"] * len(bw_cond[0].users))


if __name__ == "__main__":
    run_tests()
