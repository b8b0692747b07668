"""Non-strict torch.export of a two-level module with one annotate() block; prints, as
JSON, every node's meta keys and nn_module_stack and whether torch.export.unflatten
works.  Runs unchanged on pristine 2.5.1 (no annotate: the block is a no-op there),
on the patched 2.5.1 and on upstream torch."""
import contextlib
import json

import torch
import torch.fx.traceback as fx_traceback

annotate = getattr(fx_traceback, "annotate", lambda annotation: contextlib.nullcontext())


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        with annotate({"stage": 0}):
            y = self.linear(x)
        return y.relu()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) * 2


def describe(ep):
    nodes = {
        n.name: {"op": n.op, "keys": sorted(n.meta), "custom": n.meta.get("custom"),
                 "nn_module_stack": {k: list(v) for k, v in (n.meta.get("nn_module_stack") or {}).items()}}
        for n in ep.graph.nodes
    }
    try:
        torch.export.unflatten(ep)
        unflatten = "ok"
    except Exception as e:  # noqa: BLE001 - reported, compared by the test
        unflatten = f"{type(e).__name__}: {e}"
    return {"nodes": nodes, "unflatten": unflatten}


out = describe(torch.export.export(Model(), (torch.randn(2, 4),), strict=False))
with fx_traceback.preserve_node_meta():  # the caller's, as upstream's annotate examples do
    out["inside_preserve_node_meta"] = describe(torch.export.export(Model(), (torch.randn(2, 4),), strict=False))
out["torch"] = torch.__version__
print(json.dumps(out, sort_keys=True))
