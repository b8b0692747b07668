"""A user's training script for the ``torch-overlay report`` tests; it knows nothing of the report.

``python report_script.py mixed N``: the demo's flex_attention model (annotated regions,
HOP subgraphs in forward and backward) with an unannotated scale of its loss, trained N
steps under torch.compile(backend="aot_eager"). ``annotated N``: a small model annotated
throughout, with a tensor used twice (a gradient-accumulation op in the backward). ``demo N``:
the README's demo model trained N steps under torch.compile with its default Inductor backend;
Inductor compiles flex_attention on a GPU only (2.5.1), so on a CPU the attention is plain matmuls,
as the demo shows it where flex_attention cannot run.
"""
import sys

import torch
from torch import nn
from torch.fx.traceback import annotate


class Annotated(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8)

    def forward(self, x):
        with annotate({"region": "all"}):
            h = torch.relu(self.enc(x))
            return (h * h + h).sum()


def main(kind: str, steps: int) -> None:
    torch.manual_seed(0)
    if kind == "mixed":
        from torch_overlay.demo import HEAD_DIM, HEADS, SEQ_LEN, build_model, flex_device

        device = flex_device()  # None: flex backward refused here (torch >= 2.11 on CPU)
        model, x = build_model(device), torch.randn(1, SEQ_LEN, HEADS * HEAD_DIM, device=device or "cpu")
        compiled = torch.compile(lambda x: model(x) * 0.5, backend="aot_eager")
    elif kind == "demo":
        from torch_overlay.demo import HEAD_DIM, HEADS, SEQ_LEN, build_model

        device = "cuda" if torch.cuda.is_available() else None
        model, x = build_model(device), torch.randn(1, SEQ_LEN, HEADS * HEAD_DIM, device=device or "cpu")
        compiled = torch.compile(model)
    else:
        model, x = Annotated(), torch.randn(4, 8)
        compiled = torch.compile(model, backend="aot_eager")
    for step in range(steps):
        loss = compiled(x)
        loss.backward()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
