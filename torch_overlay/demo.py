"""``torch-overlay demo``: trace a small annotated model and print its graph metadata.

Shows, for the forward and backward graphs AOTAutograd compiles, which
annotation (``custom``) and which flags every op carries on this torch, so a
user sees at a glance what the overlay adds.
"""
from __future__ import annotations


def build_model():
    import torch
    from torch import nn
    from torch.fx.traceback import annotate

    class DemoModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)

        def forward(self, x):
            with annotate({"region": "encoder"}):
                h = torch.relu(self.fc1(x))
            with annotate({"region": "head"}):
                return self.fc2(h).sum()

    return DemoModel()


def capture(model, *inputs):
    """(forward graph, backward graph) compiled by AOTAutograd for ``model``."""
    from functorch.compile import aot_module, make_boxed_func

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    compiled = aot_module(model, fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    compiled(*inputs).backward()
    return graphs["forward"], graphs["backward"]


def main() -> str:
    import torch

    from .graph_table import meta_rows, meta_table

    if not hasattr(torch.fx.traceback, "annotate"):
        return (f"torch {torch.__version__} has no torch.fx.traceback.annotate: "
                "the overlay is not applied (run 'torch-overlay apply')")
    torch.manual_seed(0)
    fw, bw = capture(build_model(), torch.randn(2, 8))
    seqs = [r[2] for r in meta_rows(fw) + meta_rows(bw) if r[2] != ""]
    base = min(seqs) if seqs else None
    return "\n".join([
        f"torch {torch.__version__}: forward graph",
        meta_table(fw, base),
        "",
        "backward graph",
        meta_table(bw, base),
    ])
