"""Trace one annotated model through several capture paths and print the
per-node tracing metadata as JSON.

Run unchanged under the patched torch 2.5.1 and under upstream torch (the
oracle), so test_oracle_tracing_state.py can compare what both produce. Only
public torch APIs are used; the program must not import the project.
"""
import json
import sys

import torch
import torch.fx.traceback as fx_traceback
from torch import nn


class Annotated(nn.Module):
    """Two annotated regions (the inner one nested, overriding "region"),
    an unannotated tail, and a tensor used twice (gradient accumulation)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        with fx_traceback.annotate({"region": "enc", "tags": ["a"]}):
            h = self.enc(x).relu()
            with fx_traceback.annotate({"region": "head", "stage": 1}):
                y = self.head(h)
        return ((y.sum() + h.sum()) * 2,)


def node_rows(gm, graph_kind):
    rows = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        rows.append({
            "graph": graph_kind,
            "target": str(node.target),
            "seq_nr": node.meta.get("seq_nr"),
            "custom": node.meta.get("custom"),
            "autograd_backward": node.meta.get("autograd_backward"),
            "is_gradient_acc": node.meta.get("is_gradient_acc"),
            "partitioner_tag": node.meta.get("partitioner_tag"),
        })
    return rows


def capture_make_fx():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        with fx_traceback.annotate({"region": "enc"}):
            y = x.sin()
            with fx_traceback.annotate({"stage": 1}):
                y = y.cos()
        return y.exp()

    with fx_traceback.preserve_node_meta():
        gm = make_fx(f)(torch.randn(3))
    return node_rows(gm, "fw")


def capture_aot_function():
    from functorch.compile import aot_function, make_boxed_func

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    torch.manual_seed(0)
    model = Annotated()
    params = dict(model.named_parameters())

    def fn(params, x):
        return torch.func.functional_call(model, params, (x,))

    compiled = aot_function(fn, fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    compiled(params, torch.randn(2, 3))[0].backward()
    return node_rows(graphs["fw"], "fw") + node_rows(graphs["bw"], "bw")


def capture_aot_export_module():
    from torch._functorch.aot_autograd import aot_export_module

    torch.manual_seed(0)
    with fx_traceback.preserve_node_meta():
        gm, _ = aot_export_module(Annotated(), (torch.randn(2, 3),), trace_joint=True, output_loss_index=0)
    return node_rows(gm, "joint")


CAPTURES = {
    "make_fx": capture_make_fx,
    "aot_function": capture_aot_function,
    "aot_export_module": capture_aot_export_module,
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(CAPTURES)
    result = {"torch": torch.__version__, "state_after": None, "captures": {}}
    for name in names:
        result["captures"][name] = CAPTURES[name]()
    result["state_after"] = repr(fx_traceback.get_current_meta())
    print(json.dumps(result, default=str))
