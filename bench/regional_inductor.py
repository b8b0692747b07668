"""Regional Inductor against the other ways to run a model: a small GPT block stack on CPU, four ways side by side.

    .venv/bin/python bench/regional_inductor.py            # patched torch (default 2.5.1)
    .venv-oracle/bin/python bench/regional_inductor.py     # upstream torch 2.13, its own regional_inductor

Each block marks its attention and its MLP with annotate({"compile_with_inductor": ...}); layer norms and
residual additions stay outside the regions. The four ways:

- eager: the model as is (the annotations do nothing);
- inductor: torch.compile(model), the whole graph through Inductor;
- regional: torch.compile(model, backend=aot_autograd(fw_compiler=regional_inductor, bw_compiler=...)):
  only the marked regions through Inductor, forward and backward, the rest as AOTAutograd traced it;
- aot_eager: torch.compile(model, backend="aot_eager"), nothing through Inductor.

Each way runs in a process of its own with an empty Inductor cache (TORCHINDUCTOR_CACHE_DIR), so no way profits
from another's compiled code. compile_s: wall time of the first training step (forward, backward, optimizer
step) minus the median step; step_s: median of the timed steps after two warm-up steps; regions_s (regional
only): wall time of region building (``_create_inductor_marked_regions``: grouping and fuse, forward and
backward) and its share of compile_s; peak_rss_mb: the
process's peak resident set size (getrusage ru_maxrss), compilation included; it is not tracemalloc, which does
not see tensor memory.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

WAYS = ("eager", "inductor", "regional", "aot_eager")


def build_model(layers: int, dim: int, heads: int):
    import torch
    import torch.fx.traceback as fx_traceback
    import torch.nn.functional as F
    from torch import nn

    region = {"compile_with_inductor": {"inductor_configs": {}}}

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def attention(self, h):
            b, t, _ = h.shape
            q, k, v = self.qkv(h).view(b, t, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (dim // heads) ** -0.5
            mask = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            return self.proj((att @ v).transpose(1, 2).reshape(b, t, dim))

        def forward(self, x):
            h = self.ln1(x)
            with fx_traceback.annotate(region):
                a = self.attention(h)
            x = x + a
            h = self.ln2(x)
            with fx_traceback.annotate(region):
                m = self.fc2(F.gelu(self.fc1(h)))
            return x + m

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Linear(dim, dim)

        def forward(self, x):
            return self.head(self.blocks(x))

    return GPT()


def compiled(model, way: str):
    import torch

    if way == "eager":
        return model
    if way == "inductor":
        return torch.compile(model)
    if way == "aot_eager":
        return torch.compile(model, backend="aot_eager")
    from torch._dynamo.backends.common import aot_autograd
    from torch.fx.passes.regional_inductor import regional_inductor

    return torch.compile(model, backend=aot_autograd(fw_compiler=regional_inductor, bw_compiler=regional_inductor))


def time_region_building() -> dict:
    """Time regional_inductor's region building (grouping + fuse: ``_create_inductor_marked_regions``, called by
    name from ``regional_inductor``) in this process: the function is wrapped in the module, the outermost call
    of each compile timed (2.5.1's pass calls itself for nested graphs). A measurement aid of this bench only."""
    import torch.fx.passes.regional_inductor as pass_module

    inner = pass_module._create_inductor_marked_regions
    totals = {"seconds": 0.0, "calls": 0, "depth": 0}

    def timed(gm):
        totals["depth"] += 1
        start = time.perf_counter()
        try:
            return inner(gm)
        finally:
            totals["depth"] -= 1
            if totals["depth"] == 0:
                totals["seconds"] += time.perf_counter() - start
                totals["calls"] += 1

    pass_module._create_inductor_marked_regions = timed
    return totals


def run_way(way: str, args) -> dict:
    import resource
    import statistics

    import torch

    torch.manual_seed(0)
    regions = time_region_building() if way == "regional" else None
    model = build_model(args.layers, args.dim, args.heads)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    fn = compiled(model, way)
    x = torch.randn(args.batch, args.seq, args.dim)

    def step():
        t = time.perf_counter()
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t, loss.item()

    first, first_loss = step()
    for _ in range(2):
        step()
    times = [step()[0] for _ in range(args.steps)]
    median = statistics.median(times)
    out = {"regions_s": regions["seconds"], "regions_calls": regions["calls"]} if regions else {}
    return {**out, "way": way, "compile_s": max(first - median, 0.0), "step_s": median,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "first_loss": first_loss}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one way in this process, print JSON
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_way(args.one, args)))
        return 0

    import torch

    print(f"torch {torch.__version__}, {args.layers} layers, dim {args.dim}, {args.heads} heads, "
          f"batch {args.batch} x seq {args.seq}, {args.steps} timed steps, {os.cpu_count()} CPUs")
    rows = []
    for way in args.ways.split(","):
        with tempfile.TemporaryDirectory(prefix="regional-bench-") as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            argv = [sys.executable, __file__, "--one", way] + [
                f"--{k}={getattr(args, k)}" for k in ("layers", "dim", "heads", "seq", "batch", "steps")]
            proc = subprocess.run(argv, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{way}: failed\n{proc.stderr[-3000:]}")
                return 1
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    eager_step = next((r["step_s"] for r in rows if r["way"] == "eager"), None)
    print(f"{'way':10} {'compile_s':>10} {'step_s':>9} {'vs eager':>9} {'peak_rss_mb':>12} {'first_loss':>11}"
          f" {'regions_s (share of compile)':>29}")
    for r in rows:
        ratio = f"{r['step_s'] / eager_step:.2f}" if eager_step else "-"
        share = (f"{r['regions_s']:.2f} s ({100 * r['regions_s'] / max(r['compile_s'], 1e-9):.1f} %, "
                 f"{r['regions_calls']} graphs)") if "regions_s" in r else "-"
        print(f"{r['way']:10} {r['compile_s']:10.2f} {r['step_s']:9.4f} {ratio:>9} {r['peak_rss_mb']:12.0f} "
              f"{r['first_loss']:11.6f} {share:>29}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
