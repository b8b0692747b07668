"""Which activations the min-cut partitioner saves for one small graph under
``torch.autograd.graph.region_activation_memory_budget`` at budgets 0.0, 0.5
and 1.0, and the errors of a partial and of a conflicting annotation; runs
unchanged under a patched release and under upstream 2.13, JSON on the last line.

A saved activation is written as its producing op and shape (node names differ
between releases where the op is the same)."""
import json

import torch
import torch._dynamo
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd


def forward_outputs(fn, *args):
    """The forward graph's outputs after the user's output: what it saves for the backward."""
    torch._dynamo.reset()
    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"),
                           partition_fn=min_cut_rematerialization_partition)
    torch.compile(fn, backend=backend, fullgraph=True)(*args).backward()
    (output,) = [n for n in graphs["fw"].graph.nodes if n.op == "output"]
    saved = []
    for node in output.args[0][1:]:
        producer = "input" if node.op == "placeholder" else str(getattr(node.target, "__name__", node.target))
        saved.append([producer.split(".")[0], list(node.meta["val"].shape)])
    return sorted(saved)


def block(x, w1, w2):
    h = torch.relu(x @ w1)
    return torch.relu(torch.sin(h) @ w2).sum()


def under_budget(budget):
    def fn(x, w1, w2):
        with torch.autograd.graph.region_activation_memory_budget(budget):
            return block(x, w1, w2)
    return fn


def partial(x, w1, w2):
    with torch.autograd.graph.region_activation_memory_budget(0.0):
        h = torch.relu(x @ w1)
    return torch.relu(torch.sin(h) @ w2).sum()


def conflicting(x, w1, w2):
    with torch.autograd.graph.region_activation_memory_budget(0.0):
        h = torch.relu(x @ w1)
    with torch.autograd.graph.region_activation_memory_budget(1.0):
        return torch.relu(torch.sin(h) @ w2).sum()


def error_of(fn, *args):
    try:
        forward_outputs(fn, *args)
    except Exception as e:  # Dynamo wraps the partitioner's error: keep the partitioner's sentence
        text = str(e)
        start = text.index("torch.autograd.graph.region_activation_memory_budget")
        return text[start:].splitlines()[0]
    return None


def main():
    torch.manual_seed(0)
    args = (torch.randn(8, 16), torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True))
    result = {f"saved at {budget}": forward_outputs(under_budget(budget), *args) for budget in (0.0, 0.5, 1.0)}
    result["saved unannotated"] = forward_outputs(block, *args)
    result["partial"] = error_of(partial, *args)
    result["conflicting"] = error_of(conflicting, *args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
