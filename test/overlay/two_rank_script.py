"""A user's two-rank training script for test_two_ranks.py; it knows nothing of the report.

``torchrun --nproc_per_node 2 two_rank_script.py STEPS``: trains a small model under
torch.compile (CPU, gloo), wrapped in DDP, then in FSDP1; each first with its two regions
annotated, then from the same initial weights without annotations. Each rank writes
losses.rank<R>.json in the working folder: {"rank", "ddp": {"annotated": [losses], "plain":
[losses]}, "fsdp": {...}} (a file per rank: two ranks printing to one stdout can interleave).
"""
import contextlib
import json
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.fx.traceback import annotate


class Model(nn.Module):
    def __init__(self, annotated: bool):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)
        self.region = (lambda name: annotate({"region": name})) if annotated else (
            lambda name: contextlib.nullcontext())

    def forward(self, x, y):
        with self.region("encoder"):
            h = torch.relu(self.encoder(x))
        with self.region("head"):
            return nn.functional.mse_loss(self.head(h), y)


def wrap(model: nn.Module, kind: str) -> nn.Module:
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model)
    from torch.distributed.fsdp import FullyShardedDataParallel
    return FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=True)


def train(kind: str, steps: int, annotated: bool) -> list:
    torch.manual_seed(0)  # the same initial weights on every rank and in both runs
    model = wrap(Model(annotated), kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="aot_eager")
    gen = torch.Generator().manual_seed(1 + dist.get_rank())
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        loss = compiled(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    torch._dynamo.reset()
    return losses


def main(steps: int) -> None:
    dist.init_process_group("gloo")
    try:
        result = {"rank": dist.get_rank()}
        for kind in ("ddp", "fsdp"):
            result[kind] = {"annotated": train(kind, steps, True), "plain": train(kind, steps, False)}
        with open(f"losses.rank{result['rank']}.json", "w", encoding="utf-8") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]))
