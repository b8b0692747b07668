"""Views taken inside one annotate() block, made stale by a mutation and used after it, captured by every
path that functionalizes: strict and non-strict torch.export (decomposed), aot_export_module(pre_dispatch=True).

Prints, per path, the [op, custom] of each call_function node in graph order, one JSON line. Op names are
reduced to what every release from 2.5.1 to 2.15 emits alike (sum.default / sum.dim_IntList -> sum,
t / permute -> transpose)."""
import json

import torch
import torch.fx.traceback as fx_traceback
from torch._functorch.aot_autograd import aot_export_module

SAME_OP = {"sum": "sum", "t": "transpose", "permute": "transpose"}


class StaleViews(torch.nn.Module):
    def forward(self, x):
        with fx_traceback.annotate({"block": "make"}):
            y = x.clone()
            y.add_(1)
        with fx_traceback.annotate({"block": "views"}):
            v = y[1:]
            w = y.view(-1)
        with fx_traceback.annotate({"block": "mutate"}):
            y.mul_(2)
            z = v.t()
        return z + w.sum(), v


def table(gm):
    rows = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            name = str(n.target).split(".")[1]
            rows.append([SAME_OP.get(name, name), n.meta.get("custom")])
    return rows


def main():
    x = torch.randn(3, 2)
    out = {}
    for strict in (True, False):
        ep = torch.export.export(StaleViews(), (x,), strict=strict)
        out["strict" if strict else "non_strict"] = table(ep.run_decompositions().graph_module)
    with fx_traceback.preserve_node_meta():
        gm, _ = aot_export_module(StaleViews(), (x,), trace_joint=False, pre_dispatch=True)
    out["aot_export_pre_dispatch"] = table(gm)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
