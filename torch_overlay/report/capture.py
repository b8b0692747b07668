"""Capture, without changing the user's script, every graph torch.compile hands to AOTAutograd.

The hook is ``torch._dynamo.backends.common.AotAutograd.__call__``: every AOTAutograd
backend goes through it -- the default Inductor backend, ``aot_eager`` and any
``aot_autograd(fw_compiler=..., bw_compiler=...)`` of the user -- with the Dynamo
graph as its argument and the forward, backward and inference compilers in
``self.kwargs``. For the length of one call the hook records the Dynamo graph and
swaps in compilers that record the graph they are given before handing it on, so
the backend compiles exactly what it would have. The hook lives here, not in a
torch patch, and is removed when the script ends.

Graphs are reduced to plain rows (:class:`CapturedOp`) the moment they are
captured: a compiler may rewrite its graph in place afterwards.
"""
from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Callable, Optional

# 2.5.1 marks the node of autograd's gradient accumulation only in its stack trace;
# newer torch sets node.meta["is_gradient_acc"].
GRADIENT_ACCUMULATION_MARKER = "Gradient addition node due to multiple use of tensor around:"
# Node kinds that compute (a Dynamo graph also has method calls and module calls).
OP_KINDS = ("call_function", "call_method", "call_module")


@dataclass
class CapturedOp:
    """One computing node (getitem unpacking excluded) of a captured graph or of a
    subgraph nested in it (``subgraph`` is "" for the root graph)."""
    subgraph: str
    name: str
    target: str
    seq_nr: Optional[int]
    custom: Optional[dict]
    autograd_backward: bool
    gradient_accumulation: bool

    @property
    def qualified_name(self) -> str:
        return f"{self.subgraph}.{self.name}" if self.subgraph else self.name


@dataclass
class CapturedGraph:
    """A graph as captured: ``kind`` is "dynamo", "forward", "backward" or "inference";
    ``compile_index`` numbers the AOTAutograd compilations (the Dynamo graph and the
    forward and backward graphs made from it share one); ``index`` numbers all graphs."""
    index: int
    compile_index: int
    kind: str
    ops: list = field(default_factory=list)


def _target_name(node) -> str:
    import torch

    if node.meta.get("original_aten") is not None:  # torch leaves None on nodes traced between ops
        return str(node.meta["original_aten"])
    if isinstance(node.target, torch._ops.HigherOrderOperator):
        return node.target.name()
    if isinstance(node.target, str):
        return node.target
    return getattr(node.target, "__name__", str(node.target))


def snapshot_ops(gm) -> list:
    """The rows of ``gm`` and of every GraphModule nested in it, in graph order."""
    from ..graph_table import graph_modules

    ops = []
    for subgraph, module in graph_modules(gm):
        for node in module.graph.nodes:
            if node.op not in OP_KINDS or node.target is operator.getitem:
                continue
            custom = node.meta.get("custom")
            ops.append(CapturedOp(
                subgraph=subgraph,
                name=node.name,
                target=_target_name(node),
                seq_nr=node.meta.get("seq_nr"),
                custom=dict(custom) if custom else None,
                autograd_backward=bool(node.meta.get("autograd_backward")),
                gradient_accumulation=bool(node.meta.get("is_gradient_acc"))
                or GRADIENT_ACCUMULATION_MARKER in (node.meta.get("stack_trace") or ""),
            ))
    return ops


class GraphCapture:
    """Collects :class:`CapturedGraph` s while :meth:`installed` is active; calls
    ``on_graph`` with each one as it is captured (for progress lines)."""

    def __init__(self, on_graph: Callable[[CapturedGraph], None] = lambda graph: None):
        self.graphs: list = []
        self._compiles = 0
        self._on_graph = on_graph

    def _record(self, compile_index: int, kind: str, gm) -> None:
        graph = CapturedGraph(len(self.graphs) + 1, compile_index, kind, snapshot_ops(gm))
        self.graphs.append(graph)
        self._on_graph(graph)

    def _recording(self, compile_index: int, kind: str, compiler):
        def compile_recorded(gm, example_inputs, *args, **kwargs):
            self._record(compile_index, kind, gm)
            return compiler(gm, example_inputs, *args, **kwargs)
        return compile_recorded

    @contextlib.contextmanager
    def installed(self):
        from torch._dynamo.backends.common import AotAutograd

        original_call = AotAutograd.__call__
        capture = self

        def call_recorded(backend, gm, example_inputs, **kwargs):
            if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
                # AotAutograd flattens such inputs and calls itself again: record that call.
                return original_call(backend, gm, example_inputs, **kwargs)
            capture._compiles += 1
            index = capture._compiles
            capture._record(index, "dynamo", gm)
            saved = backend.kwargs
            fw = saved["fw_compiler"]
            backend.kwargs = dict(
                saved,
                fw_compiler=capture._recording(index, "forward", fw),
                bw_compiler=capture._recording(index, "backward", saved.get("bw_compiler") or fw),
                inference_compiler=capture._recording(index, "inference", saved.get("inference_compiler") or fw),
            )
            try:
                return original_call(backend, gm, example_inputs, **kwargs)
            finally:
                backend.kwargs = saved

        AotAutograd.__call__ = call_recorded
        try:
            yield self
        finally:
            AotAutograd.__call__ = original_call
