"""Tabulate the metadata of FX graphs: one row per call_function node, subgraphs included.

Used by ``torch-overlay demo`` and by the tests, so both show the same columns:
``SeqNr|OrigAten|SrcFn|FwdSrcFn|custom|autograd_backward``.
"""
from __future__ import annotations

import operator

import torch.fx


def graph_modules(gm: torch.fx.GraphModule):
    """``gm`` and every GraphModule nested in it (HOP subgraphs), depth first."""
    yield "", gm
    for name, mod in gm.named_modules():
        if name and isinstance(mod, torch.fx.GraphModule):
            yield name, mod


def _orig_aten(node: torch.fx.Node) -> str:
    """The aten overload the node came from; for a higher-order op (no aten overload), its name."""
    if node.meta.get("original_aten") is not None:  # torch leaves None on nodes traced between ops
        return str(node.meta["original_aten"])
    if isinstance(node.target, torch._ops.HigherOrderOperator):
        return node.target.name()
    return ""


def _src_fn(stack):
    return stack[-1][0] if stack else ""


def meta_rows(gm: torch.fx.GraphModule, base_seq_nr: int | None = None, skip_getitem: bool = False):
    """(graph, node name, SeqNr, OrigAten, SrcFn, FwdSrcFn, custom, autograd_backward) for
    every call_function node of ``gm`` and its subgraphs; seq_nr relative to ``base_seq_nr``.
    ``skip_getitem`` drops the getitem nodes that unpack multi-output ops, as upstream's tables do."""
    rows = []
    for sub, g in graph_modules(gm):
        for node in g.graph.nodes:
            if node.op != "call_function" or (skip_getitem and node.target is operator.getitem):
                continue
            seq = node.meta.get("seq_nr", "")
            if seq != "" and base_seq_nr is not None:
                seq -= base_seq_nr
            rows.append((
                sub,
                node.name,
                seq,
                _orig_aten(node),
                _src_fn(node.meta.get("source_fn_stack")),
                _src_fn(node.meta.get("fwd_source_fn_stack")),
                node.meta.get("custom", ""),
                node.meta.get("autograd_backward", ""),
            ))
    return rows


def meta_table(gm: torch.fx.GraphModule, base_seq_nr: int | None = None,
               columns=("SeqNr", "OrigAten", "SrcFn", "FwdSrcFn", "custom", "autograd_backward"),
               skip_getitem: bool = False) -> str:
    """Pipe-separated table, one call_function node a line, the graph prefix for subgraph nodes."""
    names = ("graph", "node", "SeqNr", "OrigAten", "SrcFn", "FwdSrcFn", "custom", "autograd_backward")
    keep = [names.index(c) for c in columns]
    lines = ["|".join(columns)]
    for row in meta_rows(gm, base_seq_nr, skip_getitem):
        prefix = f"{row[0]}." if row[0] else ""
        lines.append(prefix + "|".join(str(row[i]) for i in keep))
    return "\n".join(lines)
