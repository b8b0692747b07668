"""``torch-overlay demo``: compile a small annotated model and print its graph metadata.

Shows, for the forward and backward graphs AOTAutograd hands to its compilers
under ``torch.compile``, which annotation (``custom``) and which flags every op
carries on this torch, subgraphs included, so a user sees at a glance what the
overlay adds. The model has a flex_attention layer: its score_mod and mask_mod
become subgraphs of the forward ``flex_attention`` op and of the backward
``flex_attention_backward`` op (``fw_graph``, ``joint_graph``, ``mask_graph``).
torch >= 2.11 refuses flex_attention backward on CPU: there the demo runs on a GPU
if it has one, else leaves the flex_attention layer out and says so in one line.
"""
from __future__ import annotations

SEQ_LEN, HEADS, HEAD_DIM = 128, 2, 8


def flex_device():
    """Where flex_attention's backward can run, or None when this machine cannot run it."""
    import torch

    if torch.__version__ < "2.11":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def build_model(device):
    """The demo model on ``device``; without the flex_attention layer when ``device`` is None."""
    import torch
    from torch import nn
    from torch.fx.traceback import annotate
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx)

    class DemoModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(HEADS * HEAD_DIM, 3 * HEADS * HEAD_DIM)
            self.head = nn.Linear(HEADS * HEAD_DIM, 4)
            self.block_mask = create_block_mask(causal, 1, 1, SEQ_LEN, SEQ_LEN, device=device) if device else None

        def forward(self, x):
            b, s, _ = x.shape
            with annotate({"region": "attention"}):
                q, k, v = self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
                if self.block_mask is not None:
                    out = flex_attention(q, k, v, score_mod=relative_bias, block_mask=self.block_mask)
                else:
                    out = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
            with annotate({"region": "head"}):
                return self.head(torch.relu(out.transpose(1, 2).reshape(b, s, -1))).sum()

    return DemoModel().to(device or "cpu")


def capture(model, *inputs):
    """(forward graph, backward graph) AOTAutograd compiles for ``model`` under torch.compile."""
    import warnings

    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend=backend, fullgraph=True)(*inputs).backward()
    return graphs["forward"], graphs["backward"]


def main() -> str:
    import torch

    from .graph_table import meta_rows, meta_table

    if not hasattr(torch.fx.traceback, "annotate"):
        return (f"torch {torch.__version__} has no torch.fx.traceback.annotate: "
                "the overlay is not applied (run 'torch-overlay apply')")
    device = flex_device()
    torch.manual_seed(0)
    fw, bw = capture(build_model(device), torch.randn(1, SEQ_LEN, HEADS * HEAD_DIM, device=device or "cpu"))
    seqs = [r[2] for r in meta_rows(fw) + meta_rows(bw) if r[2] != ""]
    base = min(seqs) if seqs else None
    left_out = [] if device else [f"flex_attention left out: torch {torch.__version__} refuses its backward "
                                  "on CPU (from 2.11 on) and this machine has no GPU; attention is plain matmuls here"]
    return "\n".join(left_out + [
        f"torch {torch.__version__}, torch.compile(aot_autograd): forward graph "
        "(rows of a subgraph start with its name)",
        meta_table(fw, base, skip_getitem=True),
        "",
        "backward graph",
        meta_table(bw, base, skip_getitem=True),
    ])
