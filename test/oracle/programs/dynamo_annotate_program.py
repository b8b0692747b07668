"""Compile small annotated programs with torch.compile and print, as one JSON line, the
``custom`` of every node of every Dynamo graph (HOP subgraphs included).

Runs unchanged under the patched torch 2.5.1 and under upstream torch; the caller compares.
No preserve_node_meta() anywhere: Dynamo must not need one.
"""
import json

import torch
import torch.fx.traceback as fx_traceback
from torch.utils.checkpoint import checkpoint

CALL_OPS = ("call_function", "call_method", "call_module", "get_attr")


def nested(x):
    with fx_traceback.annotate({"pp_stage": 0}):
        with fx_traceback.annotate({"fsdp_bucket": 1}):
            y = x.sin()
        y = y * 2
    return y.cos()


@fx_traceback.annotate({"deco": 1})
def decorated(x):
    return x * 3


@fx_traceback.annotate_fn({"fn": 2})
def decorated_fn(x):
    return x - 3


def decorators(x):
    return decorated(x) + decorated_fn(x)


class DecoratedMethods(torch.nn.Module):
    @fx_traceback.annotate({"bucket": 0})
    def sin(self, x):
        return torch.sin(x)

    def forward(self, x):
        with fx_traceback.annotate({"pp_stage": 0}):
            y = self.sin(x) * 2
        return y / 3


def decorated_method(x):
    return DECORATED_METHODS(x)


DECORATED_METHODS = DecoratedMethods()


def ac_body(x):
    with fx_traceback.annotate({"inner": 1}):
        y = x.sin()
    return y.cos()


def around_checkpoint(x):
    with fx_traceback.annotate({"ac_region_id": 0}):
        z = checkpoint(ac_body, x, use_reentrant=False)
    return z + 1


def graph_break(x):
    with fx_traceback.annotate({"region": 0}):
        a = x.sin()
        torch._dynamo.graph_break()
        b = a.cos()
    return b + 1


PROGRAMS = {f.__name__: f for f in (nested, decorators, decorated_method, around_checkpoint, graph_break)}


def capture(fn):
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(4, requires_grad=True)
    out = torch.compile(fn, backend=backend)(x)
    same = bool(torch.allclose(out, fn(x)))
    rows = []
    for gm in graphs:
        per_graph = []
        for _, mod in [("", gm)] + [(n, m) for n, m in gm.named_modules() if n]:
            if isinstance(mod, torch.fx.GraphModule):
                per_graph += [n.meta.get("custom") for n in mod.graph.nodes if n.op in CALL_OPS]
        rows.append(sorted(json.dumps(c, sort_keys=True) for c in per_graph))
    return {"graphs": rows, "same_as_eager": same}


if __name__ == "__main__":
    print(json.dumps({"torch": torch.__version__,
                      "captures": {name: capture(fn) for name, fn in PROGRAMS.items()}}))
