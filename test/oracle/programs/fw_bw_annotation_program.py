"""Run small annotated models forward and backward under aot_function and print,
as JSON, the metadata of every node of the graphs handed to fw_compiler and
bw_compiler (subgraphs included).

Runs unchanged under the patched torch 2.5.1 and under upstream torch (the
oracle) for test_oracle_fw_bw_annotations.py. Only public torch APIs; the
program must not import the project.
"""
import json
import sys
import warnings

import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch import nn

ACC_MARKER = "Gradient addition node due to multiple use of tensor around:"


def rows(gm, graph_kind):
    out = []
    for sub_name, sub in [("", gm)] + [(n, m) for n, m in gm.named_modules() if n and isinstance(m, torch.fx.GraphModule)]:
        for node in sub.graph.nodes:
            if node.op != "call_function":
                continue
            out.append({
                "graph": graph_kind,
                "subgraph": sub_name,
                "target": str(node.target),
                "seq_nr": node.meta.get("seq_nr"),
                "custom": node.meta.get("custom"),
                "autograd_backward": node.meta.get("autograd_backward"),
                "partitioner_tag": node.meta.get("partitioner_tag"),
                "is_gradient_acc": bool(node.meta.get("is_gradient_acc"))
                or ACC_MARKER in (node.meta.get("stack_trace") or ""),
            })
    return out


def capture(fn, *args, module=False):
    from functorch.compile import aot_function, aot_module, make_boxed_func

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    compile_with = aot_module if module else aot_function
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile_with(fn, fw_compiler=keep("fw"), bw_compiler=keep("bw"))(*args).sum().backward()
    out = rows(graphs["fw"], "fw") + rows(graphs["bw"], "bw")
    base = min(r["seq_nr"] for r in out if r["graph"] == "fw" and r["seq_nr"] is not None)
    for r in out:  # seq_nr relative to the first forward op: comparable across releases
        r["seq_nr"] = None if r["seq_nr"] is None else r["seq_nr"] - base
    return out


def mlp():
    def fn(x, w1, w2):
        with fx_traceback.annotate({"region": "l1", "tags": ["x"]}):
            h = torch.relu(x @ w1)
        with fx_traceback.annotate({"region": "l2"}):
            y = F.gelu(h @ w2)
        with fx_traceback.annotate({"region": "loss"}):
            return y + h

    torch.manual_seed(0)
    return capture(fn, *[torch.randn(s, requires_grad=True) for s in ((4, 6), (6, 6), (6, 6))])


def conv_bn():
    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)

        def forward(self, x):
            with fx_traceback.annotate({"region": "conv"}):
                x = self.conv(x)
            with fx_traceback.annotate({"region": "bn"}):
                x = self.bn(x)
            return F.relu(x)

    torch.manual_seed(0)
    return capture(ConvBN(), torch.randn(2, 2, 6, 6), module=True)


def transformer_block():
    class Block(nn.Module):
        def __init__(self, dim=8, heads=2):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

        def forward(self, x):
            b, s, d = x.shape
            with fx_traceback.annotate({"region": "attn"}):
                q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                a = self.proj(a.transpose(1, 2).reshape(b, s, d))
            x = x + a
            with fx_traceback.annotate({"region": "mlp"}):
                m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return x + m

    torch.manual_seed(0)
    return capture(Block(), torch.randn(2, 4, 8, requires_grad=True), module=True)


def custom_function():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            with fx_traceback.annotate({"shared": "bw", "bw_only": 1}):
                return grad * 3

    def fn(x):
        with fx_traceback.annotate({"region": "scale", "shared": "fw"}):
            y = Scale.apply(x)
        return y.cos()

    return capture(fn, torch.randn(5, requires_grad=True))


def checkpointed():
    from torch.utils.checkpoint import checkpoint

    def block(x, w):
        return torch.sigmoid(torch.relu(x @ w)) * 2

    def fn(x, w, w2):
        with fx_traceback.annotate({"region": "ckpt"}):
            h = checkpoint(block, x, w, use_reentrant=False)
        return h @ w2

    torch.manual_seed(0)
    return capture(fn, *[torch.randn(s, requires_grad=True) for s in ((4, 3), (3, 3), (3, 2))])


PROGRAMS = {
    "mlp": mlp,
    "conv_bn": conv_bn,
    "transformer_block": transformer_block,
    "custom_function": custom_function,
    "checkpoint": checkpointed,
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(PROGRAMS)
    result = {"torch": torch.__version__, "programs": {name: PROGRAMS[name]() for name in names}}
    print(json.dumps(result, default=str))
