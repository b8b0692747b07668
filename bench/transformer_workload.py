"""One measurement in one fresh process: compile a deep transformer with flex_attention
and annotated regions, then time training steps.

usage: python transformer_workload.py --backend aot_eager|inductor [--attention flex|sdpa] --layers N
       [--memory] [--no-annotate] [--profile PREFIX] [--warm-compiles N]
Prints one JSON line: compile_s (first forward+backward, i.e. Dynamo + AOTAutograd
+ backend), compile_cpu_s (the same, in this process's CPU time: with one thread it
leaves out the time spent waiting for a core on a loaded machine), step_s (median of later steps), peak_trace_bytes (tracemalloc peak
during compilation; only with --memory, whose tracing overhead spoils the times). The heap is
collected before tracemalloc starts: otherwise the garbage left by building the model is collected
whenever the cyclic GC's next full collection happens to fire, and that moment, not the compile, sets
the peak (it moved the peak by 4 % between two torches that allocate the same).
torch 2.5.1's Inductor has no CPU lowering for flex_attention (it asks for an
NVIDIA driver), so Inductor runs use ``--attention sdpa``.
Runs unchanged on vanilla torch, where ``annotate`` does not exist: it then
uses a null context, so both sides compile the same model. ``--no-annotate``
uses the null context on any torch, to price the annotations themselves.
``--profile PREFIX`` runs the compile and the timed steps under cProfile and writes
PREFIX.compile.prof and PREFIX.steps.prof (bench/compile_calls.py counts the calls).
``--warm-compiles N`` then compiles the same model N more times in this process (Dynamo's caches reset
before each) and adds warm_compile_cpu_s, the least CPU time of those compiles. CPU time on these
shared virtual machines swings by 10-20 % between runs of the same compile; interference (the host's
other guests: stolen time, shared caches) only ever adds to it, so the least of several compiles is the
cost with the least interference. It leaves out what only a process's first compile pays (imports,
lazy inits).
"""
import argparse
import contextlib
import cProfile
import gc
import json
import statistics
import time
import tracemalloc

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.nn import functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention



def no_annotation(tag):
    return contextlib.nullcontext()


annotate = getattr(fx_traceback, "annotate", no_annotation)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.01


class Block(nn.Module):
    def __init__(self, dim, heads, index, attention):
        super().__init__()
        self.heads, self.index, self.attention = heads, index, attention
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, block_mask):
        b, s, d = x.shape
        with annotate({"ac_region_id": self.index, "part": "attention"}):
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            if self.attention == "flex":
                attn = flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)
            else:
                attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        with annotate({"ac_region_id": self.index, "part": "mlp"}):
            return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, layers, attention, dim=64, heads=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads, i, attention) for i in range(layers))

    def forward(self, x, block_mask):
        for block in self.blocks:
            x = block(x, block_mask)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--attention", choices=["flex", "sdpa"], default="flex")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--no-annotate", action="store_true")
    ap.add_argument("--profile", metavar="PREFIX")
    ap.add_argument("--warm-compiles", type=int, default=0)
    a = ap.parse_args()
    if a.no_annotate:
        global annotate
        annotate = no_annotation
    torch.manual_seed(0)
    model = Transformer(a.layers, a.attention)
    x = torch.randn(2, a.seq, 64)
    block_mask = create_block_mask(causal, None, None, a.seq, a.seq, device="cpu")
    compiled = torch.compile(model, backend=a.backend)

    def step():
        compiled(x, block_mask).sum().backward()

    if a.memory:
        gc.collect()
        tracemalloc.start()
    profile = cProfile.Profile() if a.profile else None
    t, cpu = time.perf_counter(), time.process_time()
    if profile:
        profile.runcall(step)
        profile.dump_stats(f"{a.profile}.compile.prof")
    else:
        step()
    compile_s, compile_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] if a.memory else None
    if a.memory:
        tracemalloc.stop()
    steps = []
    profile = cProfile.Profile() if a.profile else None
    for _ in range(a.steps):
        t = time.perf_counter()
        profile.runcall(step) if profile else step()
        steps.append(time.perf_counter() - t)
    if profile:
        profile.dump_stats(f"{a.profile}.steps.prof")
    warm = []
    for _ in range(a.warm_compiles):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=a.backend)
        cpu = time.process_time()
        step()
        warm.append(time.process_time() - cpu)
    print(json.dumps({"torch": torch.__version__, "annotate": annotate is not no_annotation,
                      "compile_s": compile_s, "compile_cpu_s": compile_cpu_s, "step_s": statistics.median(steps),
                      "peak_trace_bytes": peak, "warm_compile_cpu_s": min(warm) if warm else None}))


if __name__ == "__main__":
    main()
