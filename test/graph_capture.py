"""Capture the graphs AOTAutograd hands to its compilers and tabulate their metadata.

torch 2.5.1 has no ``torch._dynamo.testing.AotEagerAndRecordGraphs``; this is the
project's small equivalent, built only on public ``aot_autograd`` /
``aot_function`` hooks, so the same tests run on 2.5.1 and on current torch.
"""
from __future__ import annotations

import torch
import torch.fx

from torch_overlay.graph_table import graph_modules, meta_rows, meta_table  # noqa: F401 (re-exported)


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


def annotating_backend(recorder: RecordGraphs, annotation: dict, select):
    """A torch.compile backend that puts a copy of ``annotation`` into
    ``node.meta["custom"]`` of every Dynamo graph node ``select(subgraph name,
    node)`` accepts, then hands the graph to AOTAutograd with ``recorder``'s
    compilers.

    torch 2.5.1's Dynamo does not run ``fx.traceback.annotate``; this gives the
    Dynamo graph the ``custom`` metadata newer Dynamo would, so AOTAutograd's
    handling of higher-order ops that only Dynamo produces (checkpoint's
    ``tag_activation_checkpoint``) can be tested on 2.5.1.
    """
    import copy

    aot_backend = recorder.backend

    def backend(gm, example_inputs):
        for name, node in call_function_nodes(gm):
            if select(name, node):
                node.meta["custom"] = copy.deepcopy(annotation)
        return aot_backend(gm, example_inputs)

    return backend
