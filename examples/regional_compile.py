"""Regional compilation: Inductor compiles only the parts of a model you mark, the rest runs as traced.

    .venv/bin/python examples/regional_compile.py

The same code runs on a patched torch 2.5.1-2.9.1 (torch-overlay's backport) and on torch 2.10 or later
(upstream's own torch.fx.passes.regional_inductor). The MLP of each block is marked for Inductor, with an
Inductor setting of its own; attention, layer norms and residual additions stay as AOTAutograd traced them.
"""
import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.regional_inductor import regional_inductor

# The annotation regional_inductor looks for; inductor_configs (optional) patch torch._inductor.config while
# the region compiles.
MLP_REGION = {"compile_with_inductor": {"inductor_configs": {"epilogue_fusion": True}}}


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        with fx_traceback.annotate(MLP_REGION):
            m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + m


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Block(64), Block(64))
    x = torch.randn(2, 16, 64)

    graphs = []

    def compiler(gm, example_inputs):  # regional_inductor, keeping the graph it returns to show it
        gm = regional_inductor(gm, *example_inputs)
        graphs.append(gm)
        return gm

    backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler)
    compiled = torch.compile(model, backend=backend)

    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    print(f"torch {torch.__version__}: output and gradients equal eager's")
    for kind, gm in zip(("forward", "backward"), graphs):
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        regions = [n for n in calls if not isinstance(n.target, torch._ops.OpOverload) and n.target.__name__ != "getitem"]
        print(f"{kind} graph: {len(regions)} regions compiled by Inductor, "
              f"{len(calls) - len(regions)} ops left as traced")


if __name__ == "__main__":
    main()
