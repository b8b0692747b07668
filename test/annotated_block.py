"""The transformer-like block the Inductor annotation tests compile (test/inductor/test_kernel_annotations.py,
test/inductor/test_replacement_annotations.py), defined once: an attention-like softmax and an MLP, each part in
the region its test names."""
import contextlib

import torch
import torch.fx.traceback as fx_traceback


class AnnotatedBlock(torch.nn.Module):
    """scores = q(x) @ k(x)^T * 0.25 (part "scale"), softmax(scores) @ x ("attention"), down(relu(up(...)))
    ("mlp"), each part under annotate(regions[part]); annotated=False: the same block, annotated nowhere. The
    softmax rewrite of Inductor's joint-graph passes matches across "scale" and "attention"."""

    def __init__(self, regions, annotated=True):
        super().__init__()
        self.regions = regions
        self.annotated = annotated
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def region(self, part):
        if self.annotated:
            return fx_traceback.annotate(self.regions[part])
        return contextlib.nullcontext()

    def forward(self, x):
        with self.region("scale"):
            scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.25
        with self.region("attention"):
            probs = torch.softmax(scores, dim=-1) @ x
        with self.region("mlp"):
            return self.down(torch.relu(self.up(probs)))
