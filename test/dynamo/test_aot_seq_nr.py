"""seq_nr pairing and autograd_backward in Dynamo-driven joint captures:
Dynamo export + _aot_export_function (upstream PRs 103129/126573, already in
2.5.1) and torch.compile with an aot_autograd backend (patch
180251-autograd-backward-state adds the flag)."""
import sys
from pathlib import Path

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
try:
    from torch._functorch._aot_autograd.traced_function_transforms import create_functional_call
except ImportError:  # 2.9 renamed traced_function_transforms to graph_capture_wrappers
    from torch._functorch._aot_autograd.graph_capture_wrappers import create_functional_call
from torch._functorch.aot_autograd import _aot_export_function
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/graph_capture.py when run as a script

from graph_capture import RecordGraphs, meta_rows

# Dynamo of torch >= 2.10 (seen on 2.10-2.12) inlines nn.Module calls, so source_fn names the function
# (conv2d, linear), and traces fewer detach nodes.
NEWER_DYNAMO = torch.__version__ >= "2.10"  # TorchVersion: compares as a version


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, kernel_size=1)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.relu1 = torch.nn.ReLU()
        self.fc1 = torch.nn.Linear(64, 1)
        self.loss_fn = torch.nn.L1Loss()

    def forward(self, x, target):
        y = x
        x = self.relu1(self.bn1(self.conv1(x)))
        x = torch.flatten(x + y)
        return (self.loss_fn(self.fc1(x), target),)


def call_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


class TestAotSeqNr(TestCase):
    def setUp(self):
        torch.manual_seed(0)
        torch._dynamo.reset()

    def dynamo_export_joint(self):
        mod = ConvNet().train()
        x = torch.rand(1, 4, 4, 4, requires_grad=True)
        target = torch.rand(1)
        g_mod, _ = torch._dynamo.export(mod, x, target)
        params = {**dict(g_mod.named_parameters(remove_duplicate=False)),
                  **dict(g_mod.named_buffers(remove_duplicate=False))}
        flat, spec = pytree.tree_flatten(params)
        fn = create_functional_call(g_mod, spec, len(flat))
        with torch.enable_grad(), fx_traceback.preserve_node_meta():
            fx_g, _, _, _ = _aot_export_function(fn, [*flat, x, target], decompositions=None,
                                                 num_params_buffers=len(flat), no_tangents=True)
        return fx_g

    def joint_table(self, fx_g, columns):
        """meta_table rows without getitem nodes (upstream's table skips them)."""
        rows = [r for r in meta_rows(fx_g) if not r[1].startswith("getitem")]
        base = min(r[2] for r in rows if r[2] != "")
        names = ("graph", "node", "SeqNr", "OrigAten", "SrcFn", "FwdSrcFn", "custom", "autograd_backward")
        keep = [names.index(c) for c in columns]
        lines = ["|".join(columns)]
        for r in rows:
            r = (*r[:2], r[2] - base if r[2] != "" else "", *r[3:])
            lines.append("|".join(str(r[i]) for i in keep))
        return "\n".join(lines)

    def test_dynamo_export_joint_table(self):
        # Each backward row carries the seq_nr of the forward op it
        # differentiates and autograd_backward; the trailing gradient
        # accumulation add is flagged too (is_gradient_acc).
        fx_g = self.dynamo_export_joint()
        table = self.joint_table(fx_g, ("SeqNr", "OrigAten", "SrcFn", "autograd_backward"))
        if NEWER_DYNAMO:  # 2.10+ Dynamo names SrcFn by the functional op, traces fewer detach ops
            table = table.replace("|aten._unsafe_view.default|", "|aten.view.default|")  # 2.15: _unsafe_view
            self.assertExpectedInline(table, """\
SeqNr|OrigAten|SrcFn|autograd_backward
0|aten.convolution.default|conv2d|
0|aten.add.Tensor|add_|
1|aten._native_batch_norm_legit_functional.default|batch_norm|
2|aten.relu.default|relu|
2|aten.detach.default|relu|
3|aten.add.Tensor|add|
4|aten.view.default|flatten|
5|aten.view.default|linear|
6|aten.t.default|linear|
7|aten.addmm.default|linear|
8|aten.view.default|linear|
9|aten.sub.Tensor|l1_loss|
10|aten.abs.default|l1_loss|
11|aten.mean.default|l1_loss|
11|aten.ones_like.default||
11|aten.expand.default||True
11|aten.div.Scalar||True
10|aten.sgn.default||True
10|aten.mul.Tensor||True
8|aten.view.default||True
7|aten.t.default||True
7|aten.mm.default||True
7|aten.t.default||True
7|aten.mm.default||True
7|aten.t.default||True
7|aten.sum.dim_IntList||True
7|aten.view.default||True
6|aten.t.default||True
5|aten.view.default||True
4|aten.view.default||True
2|aten.detach.default||True
2|aten.threshold_backward.default||True
1|aten.native_batch_norm_backward.default||True
0|aten.convolution_backward.default||True
11|aten.add.Tensor||True""")
            return
        self.assertExpectedInline(table, """\
SeqNr|OrigAten|SrcFn|autograd_backward
0|aten.convolution.default|l__self___conv1|
0|aten.add.Tensor|l__self___bn1|
1|aten._native_batch_norm_legit_functional.default|l__self___bn1|
2|aten.relu.default|l__self___relu1|
2|aten.detach.default|l__self___relu1|
2|aten.detach.default|l__self___relu1|
3|aten.add.Tensor|add|
4|aten.view.default|flatten|
5|aten.view.default|l__self___fc1|
6|aten.t.default|l__self___fc1|
7|aten.addmm.default|l__self___fc1|
8|aten.view.default|l__self___fc1|
9|aten.sub.Tensor|l__self___loss_fn|
10|aten.abs.default|l__self___loss_fn|
11|aten.mean.default|l__self___loss_fn|
11|aten.ones_like.default||
11|aten.expand.default||True
11|aten.div.Scalar||True
10|aten.sgn.default||True
10|aten.mul.Tensor||True
8|aten.view.default||True
7|aten.t.default||True
7|aten.mm.default||True
7|aten.t.default||True
7|aten.mm.default||True
7|aten.t.default||True
7|aten.sum.dim_IntList||True
7|aten.view.default||True
6|aten.t.default||True
5|aten.view.default||True
4|aten.view.default||True
2|aten.detach.default||True
2|aten.detach.default||True
2|aten.threshold_backward.default||True
1|aten.native_batch_norm_backward.default||True
0|aten.convolution_backward.default||True
11|aten.add.Tensor||True""")
        acc = [n for n in call_nodes(fx_g) if n.meta.get("is_gradient_acc")]
        self.assertEqual([(n.target, n.meta["autograd_backward"]) for n in acc], [(torch.ops.aten.add.Tensor, True)])

    def test_dynamo_export_joint_fwd_src_fn_matches_upstream(self):
        # Upstream's FwdSrcFn column: the forward→backward metadata copy finds
        # the forward op of every backward op by seq_nr, also for functional
        # ops (flatten), and leaves the gradient accumulation add alone.
        fx_g = self.dynamo_export_joint()
        rows = self.joint_table(fx_g, ("SeqNr", "OrigAten", "SrcFn", "FwdSrcFn")).splitlines()
        backward = [r for r in rows[1:] if r.split("|")[2] == ""]
        self.assertIn("4|aten.view.default||flatten", backward)
        self.assertEqual(backward[-1], "11|aten.add.Tensor||")

    def test_dynamo_export_joint_every_backward_op_pairs(self):
        fx_g = self.dynamo_export_joint()
        nodes = call_nodes(fx_g)
        backward = [n for n in nodes if n.meta.get("autograd_backward") and not n.meta.get("is_gradient_acc")]
        forward = [n for n in nodes if n.meta.get("partitioner_tag") != "is_backward"]
        fw_seq = {n.meta["seq_nr"] for n in forward}
        self.assertTrue(backward)
        self.assertEqual([n.format_node() for n in backward if n.meta["seq_nr"] not in fw_seq], [])
        self.assertEqual([n for n in forward if "autograd_backward" in n.meta], [])

    def test_torch_compile_backward_pairs_and_is_flagged(self):
        rec = RecordGraphs()
        mod = ConvNet().train()
        compiled = torch.compile(mod, backend=rec.backend)
        compiled(torch.rand(1, 4, 4, 4, requires_grad=True), torch.rand(1))[0].backward()
        (fw,), (bw,) = rec.fw_graphs, rec.bw_graphs
        fw_seq = {n.meta["seq_nr"] for n in call_nodes(fw)}
        backward = [n for n in call_nodes(bw) if n.meta.get("partitioner_tag") == "is_backward"]
        self.assertTrue(backward)
        for n in backward:
            self.assertIs(n.meta.get("autograd_backward"), True, n.format_node())
            if not n.meta.get("is_gradient_acc"):
                self.assertIn(n.meta["seq_nr"], fw_seq, n.format_node())
        self.assertEqual([n.name for n in call_nodes(fw) if "autograd_backward" in n.meta], [])


if __name__ == "__main__":
    run_tests()
