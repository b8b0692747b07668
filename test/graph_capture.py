"""Capture the graphs AOTAutograd hands to its compilers and tabulate their metadata.

torch 2.5.1 has no ``torch._dynamo.testing.AotEagerAndRecordGraphs``; this is the
project's small equivalent, built only on public ``aot_autograd`` /
``aot_function`` hooks, so the same tests run on 2.5.1 and on current torch.
"""
from __future__ import annotations

import torch
import torch.fx

from torch_overlay.graph_table import graph_modules, meta_rows, meta_table

__all__ = ["RecordGraphs", "call_function_nodes", "compile_with_dynamo", "graph_modules", "meta_rows", "meta_table"]


class RecordGraphs:
    """fw/bw compilers that record each GraphModule and run it eagerly."""

    def __init__(self):
        self.fw_graphs: list[torch.fx.GraphModule] = []
        self.bw_graphs: list[torch.fx.GraphModule] = []

    def fw_compiler(self, gm, example_inputs):
        self.fw_graphs.append(gm)
        return gm.forward

    def bw_compiler(self, gm, example_inputs):
        self.bw_graphs.append(gm)
        return gm.forward

    @property
    def backend(self):
        """A torch.compile backend (aot_eager with recording)."""
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=self.fw_compiler, bw_compiler=self.bw_compiler)


def call_function_nodes(gm: torch.fx.GraphModule):
    """(subgraph name, node) for every call_function node of ``gm`` and of each
    GraphModule nested in it; the root graph's name is ""."""
    for name, sub in graph_modules(gm):
        for node in sub.graph.nodes:
            if node.op == "call_function":
                yield name, node


def compile_with_dynamo(fn, fw_compiler, bw_compiler):
    """torch.compile(fullgraph=True) of ``fn`` in front of AOTAutograd with these compilers (after a Dynamo
    reset, so each capture starts from a fresh cache)."""
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    return torch.compile(fn, backend=aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler), fullgraph=True)
