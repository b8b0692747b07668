"""DTensor loss_parallel under torch.compile: the whole cross-entropy backward carries the region.

``F.cross_entropy`` of a Shard(1) DTensor under ``loss_parallel()`` runs DTensor's NLL handler, an
autograd.Function whose forward applies ``DTensor.from_local`` to the plain target: the NLL's forward nodes
take the inner Node's number, and its backward (the whole nll backward) pairs with no forward node. Upstream
2.13 leaves 25 of its 42 backward nodes unannotated; local-bw-seq-nr-ranges gives them the annotation that
was current when autograd numbered their Node.

Two gloo ranks on CPU, spawned, with a FileStore; about 11 s a release. It runs where torch compiles the
program: from 2.8.0. Torch 2.5.1, 2.6.0 and 2.7.1 cannot compile it (``KeyError: 'val'``, pristine too; measured
on each). Patched 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.1, 2.13.0 and 2.14.1 annotate every backward node; pristine
2.11.0 leaves 25 of its 40 unannotated, as 2.13 does (measured 2026-11-25).
"""
import json
import os
import sys
import tempfile
import unittest
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.fx.traceback import annotate
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from graph_capture import RecordGraphs, call_function_nodes  # noqa: E402

WORLD_SIZE = 2
COMPILES = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8)


def loss_in_region(logits, target):
    with annotate({"module_fqn": "loss"}):
        return F.cross_entropy(logits, target)


def backward_regions(rank, folder):
    """One rank: compile the loss, run forward and backward; writes (node name, module_fqn) of every backward
    node that is not a gradient accumulation to rank<N>.json in ``folder``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    store = dist.FileStore(os.path.join(folder, "store"), WORLD_SIZE)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE)
    try:
        torch.manual_seed(0)
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        logits = distribute_tensor(torch.randn(4, 8, requires_grad=True), mesh, [Shard(1)])
        target = torch.randint(0, 8, (4,))
        recorder = RecordGraphs()
        torch._dynamo.reset()
        with warnings.catch_warnings(), loss_parallel():
            warnings.simplefilter("ignore")
            loss = torch.compile(loss_in_region, backend=recorder.backend)(logits, target)
            loss.backward()
        nodes = [(n.name, (n.meta.get("custom") or {}).get("module_fqn"))
                 for bw in recorder.bw_graphs for _, n in call_function_nodes(bw)
                 if not n.meta.get("is_gradient_acc")]
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
            json.dump(nodes, f)
    finally:
        dist.destroy_process_group()


# 2.5.1-2.7.1 cannot compile the program, pristine or patched (KeyError 'val').
@unittest.skipUnless(COMPILES and dist.is_available(), "loss_parallel under torch.compile: torch >= 2.8 only")
class TestLossParallelAnnotations(TestCase):
    def test_every_backward_node_of_the_loss_carries_the_region(self):
        # spawn, not fork: a fork after this process ran autograd's backward threads is refused (seen on 2.15.0)
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(backward_regions, args=(tmp,), nprocs=WORLD_SIZE, join=True, start_method="spawn")
            results = {}
            for rank in range(WORLD_SIZE):
                with open(os.path.join(tmp, f"rank{rank}.json")) as f:
                    results[rank] = [tuple(node) for node in json.load(f)]
        for rank, nodes in results.items():
            self.assertGreater(len(nodes), 0, rank)
            self.assertEqual([name for name, region in nodes if region != "loss"], [], rank)


if __name__ == "__main__":
    run_tests()
