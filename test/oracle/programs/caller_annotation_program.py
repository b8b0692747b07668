"""Call compiled functions inside an eager ``torch.fx.traceback.annotate`` block and print,
as one JSON line, what the caller's annotation does to them: the ``custom`` of the Dynamo,
AOT forward and AOT backward nodes, whether Dynamo guards on it, how often it compiles
under changing annotations, and whether results equal eager's.

Runs unchanged under the patched torch (any release) and under upstream torch; the caller
compares. ``python caller_annotation_program.py on`` sets
``torch._dynamo.config.trace_under_caller_annotation`` (beyond upstream, patched torch only).
"""
import json
import sys

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._dynamo.backends.common import aot_autograd


class BadRepr:
    """An annotation value whose repr raises."""

    def __repr__(self):
        raise RuntimeError("no repr")


def sin_cos(x):
    return x.sin().cos()


def by_preserved_node_meta(x):
    if fx_traceback.has_preserved_node_meta():
        return x * 2
    return x


def customs(gm):
    """Sorted distinct JSON ``custom`` of the call_function/call_method nodes of ``gm``."""
    return sorted({json.dumps(n.meta.get("custom"), sort_keys=True)
                   for n in gm.graph.nodes if n.op in ("call_function", "call_method")})


def compile_with_guards(fn, backend):
    """``fn`` compiled with ``backend``, and the list the guard names of each compile go to."""
    guard_names = []

    def record_guards(guards):
        guard_names.append(sorted({g.inner_create_fn().__name__ for g in guards}))

    return torch._dynamo.optimize(backend, guard_export_fn=record_guards)(fn), guard_names


def traced_inside_annotate():
    torch._dynamo.reset()
    dynamo_graphs, fw_graphs, bw_graphs = [], [], []

    def keep(graphs):
        def compiler(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        return compiler

    aot = aot_autograd(fw_compiler=keep(fw_graphs), bw_compiler=keep(bw_graphs))

    def backend(gm, example_inputs):
        dynamo_graphs.append(gm)
        return aot(gm, example_inputs)

    compiled, guard_names = compile_with_guards(sin_cos, backend)
    x = torch.randn(4, requires_grad=True)
    with fx_traceback.annotate({"outer": 1}):
        out = compiled(x)
        out.sum().backward()
    return {"dynamo": [customs(g) for g in dynamo_graphs], "forward": [customs(g) for g in fw_graphs],
            "backward": [customs(g) for g in bw_graphs], "same_as_eager": bool(torch.equal(out, sin_cos(x))),
            "guards_on_annotation": ["FX_TRACEBACK_ANNOTATION" in names for names in guard_names]}


def compiles_under_changing_annotations():
    counts = {}
    for name, annotations in (("12 annotations", [{"i": i} for i in range(12)]),
                              ("fresh object", [{"obj": object()} for _ in range(3)]),
                              ("bad repr", [{"v": BadRepr()}] * 3)):
        torch._dynamo.reset()
        frames = []

        def backend(gm, example_inputs):
            frames.append(gm)
            return gm.forward

        compiled = torch.compile(sin_cos, backend=backend)
        x = torch.randn(4)
        same = True
        for annotation in annotations:
            with fx_traceback.annotate(annotation):
                same &= bool(torch.equal(compiled(x), sin_cos(x)))
        counts[name] = {"compiles": len(frames), "same_as_eager": same}
    return counts


def preserved_node_meta_branch():
    torch._dynamo.reset()
    x = torch.tensor(30.0)
    compiled = torch.compile(by_preserved_node_meta, backend="eager")
    with fx_traceback.annotate({"outer": 1}):
        return {"eager": by_preserved_node_meta(x).item(), "compiled": compiled(x).item()}


if __name__ == "__main__":
    if sys.argv[1:] == ["on"]:
        torch._dynamo.config.trace_under_caller_annotation = True
    print(json.dumps({"torch": torch.__version__, "traced": traced_inside_annotate(),
                      "compiles": compiles_under_changing_annotations(),
                      "preserved_node_meta": preserved_node_meta_branch()}))
