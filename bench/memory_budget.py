"""Per-region activation memory budget: what torch.autograd.graph.region_activation_memory_budget
does to a small GPT block stack on CPU, patched 2.5.1 (.venv) and upstream 2.13 (.venv-oracle) side by side.

usage: python bench/memory_budget.py [--backend aot_eager|inductor] [--steps N] [--repeats R]
       python bench/memory_budget.py --worker BUDGET --backend B --steps N   (one measurement, JSON)

Each measurement is a fresh process: compile one training step (forward, loss, backward) of the model with
the whole forward inside ``region_activation_memory_budget(BUDGET)`` (``none``: no annotation, the global
default), then time later steps. Reported per budget and torch:
- activation bytes: what the compiled forward keeps for the backward, read off the live autograd graph after
  a forward (the saved tensors of every node reachable from the loss, storages counted once, parameters and
  the input left out). It is the activation memory at its peak, the moment the backward starts.
- step ms: median wall time of a forward+backward over N steps (after the compile step).
Processes of the two torches alternate, budget by budget, ``--repeats`` times; the median is shown.
The budget should move activation bytes on 2.5.1 exactly as on 2.13 (same ratio to budget 1.0).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHONS = {"2.5.1 patched": REPO / ".venv" / "bin" / "python", "2.13.0 upstream": REPO / ".venv-oracle" / "bin" / "python"}
BUDGETS = ["0.0", "0.5", "1.0", "none"]


def build_model():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
            return x + self.mlp(self.norm2(x))

    class GPT(nn.Module):
        def __init__(self, vocab=512, dim=128, heads=4, layers=4, seq=128):
            super().__init__()
            self.embed, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.zeros(seq, dim))
            self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
            self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    return GPT()


def saved_activation_bytes(loss, excluded):
    """Bytes of the distinct storages the autograd graph of ``loss`` keeps for the backward, less ``excluded``."""
    seen, storages, todo = set(), {}, [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        try:
            saved = node.saved_tensors
        except (AttributeError, RuntimeError):
            saved = ()
        for t in saved:
            if t is not None:
                storage = t.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        todo.extend(next_node for next_node, _ in node.next_functions)
    return sum(n for ptr, n in storages.items() if ptr not in excluded)


def worker(budget: str, backend: str, steps: int) -> dict:
    import contextlib

    import torch

    torch.set_num_threads(1)  # one core per process: steady times on a shared 2-core machine
    torch.manual_seed(0)
    model = build_model()
    tokens = torch.randint(0, 512, (8, 128))

    def region():
        if budget == "none":
            return contextlib.nullcontext()
        return torch.autograd.graph.region_activation_memory_budget(float(budget))

    def forward(tokens):
        with region():
            return model(tokens)

    compiled = torch.compile(forward, backend=backend, fullgraph=True)
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()} | {tokens.untyped_storage().data_ptr()}
    start = time.perf_counter()
    compiled(tokens).backward()
    compile_s = time.perf_counter() - start
    loss = compiled(tokens)
    activation_bytes = saved_activation_bytes(loss, excluded)
    loss.backward()
    times = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        compiled(tokens).backward()
        times.append(time.perf_counter() - start)
    return {"torch": torch.__version__, "budget": budget, "activation_bytes": activation_bytes,
            "step_ms": 1000 * statistics.median(times), "compile_s": compile_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", metavar="BUDGET")
    parser.add_argument("--backend", default="aot_eager", choices=["aot_eager", "inductor"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.backend, args.steps)))
        return

    runs = {(name, b): [] for name in PYTHONS for b in BUDGETS}
    for _ in range(args.repeats):
        for budget in BUDGETS:
            for name, python in PYTHONS.items():  # the two torches alternate
                out = subprocess.run([str(python), __file__, "--worker", budget, "--backend", args.backend,
                                      "--steps", str(args.steps)], capture_output=True, text=True, check=True)
                runs[(name, budget)].append(json.loads(out.stdout.strip().splitlines()[-1]))

    print(f"backend {args.backend}, 4 GPT blocks (dim 128, 4 heads, seq 128, batch 8), CPU; "
          f"median of {args.repeats} processes, step = median of {args.steps} steps")
    print(f"{'torch':<16} {'budget':>6} {'activation MB':>14} {'vs 1.0':>7} {'step ms':>8} {'vs 1.0':>7} {'compile s':>9}")
    for name in PYTHONS:
        full = runs[(name, "1.0")]
        full_bytes = statistics.median(r["activation_bytes"] for r in full)
        full_ms = statistics.median(r["step_ms"] for r in full)
        for budget in BUDGETS:
            rs = runs[(name, budget)]
            act = statistics.median(r["activation_bytes"] for r in rs)
            ms = statistics.median(r["step_ms"] for r in rs)
            comp = statistics.median(r["compile_s"] for r in rs)
            print(f"{name:<16} {budget:>6} {act / 2**20:>14.2f} {act / full_bytes:>7.3f} {ms:>8.1f} "
                  f"{ms / full_ms:>7.3f} {comp:>9.1f}")
    same = all(statistics.median(r["activation_bytes"] for r in runs[(a, b)])
               == statistics.median(r["activation_bytes"] for r in runs[(c, b)])
               for b in BUDGETS for a, c in [tuple(PYTHONS)])
    print("activation bytes equal between the two torches at every budget:", same)


if __name__ == "__main__":
    main()
