"""Graphs for comparing regional_inductor's grouping with upstream's CapabilityBasedPartitioner.

The partitioner sees of a graph only its nodes in order, who uses whom, which nodes are getitems and which are
supported, so a graph travels to the 2.13 oracle (``.venv-oracle``) as that structure (``graph_spec``) and is
rebuilt there (``build``) with the same node order, inputs in the same order (hence the same ``users`` order)
and the same names. Used by test/fx/test_regional_partitions.py and bench/regional_partitions.py.

- ``random_graph``: chains, branches and joins, multi-output ops read by getitems (some of a getitem's result
  again), get_attr subgraphs taken by a HOP-like call, marked ops of several ``inductor_region`` ids.
- ``model_graphs``: the forward and backward graphs AOTAutograd makes of HF LLaMA and GPT-2 (tiny configs) and
  of bench/regional_inductor.py's GPT block stack, attention and MLP of every block marked.
"""
from __future__ import annotations

import operator
import random

DEFAULT_REGION = "default"  # the region of marked nodes whose annotation names no inductor_region

# Run by the oracle's Python: the partitions CapabilityBasedPartitioner proposes for each spec on stdin.
ORACLE_SIDE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from partition_graphs import build, upstream_partitions
specs = json.load(sys.stdin)
print(json.dumps([upstream_partitions(*build(spec)) for spec in specs]))
"""


def marked_regions(graph) -> list[set]:
    """The marked nodes of ``graph`` by inductor_region id (one default region for those without), in the order
    each region's first node appears: the units regional_inductor partitions one at a time."""
    by_id: dict = {}
    for node in graph.nodes:
        custom = node.meta.get("custom") or {}
        if node.op in ("placeholder", "output") or "compile_with_inductor" not in custom:
            continue
        mark = custom["compile_with_inductor"]
        region = mark["inductor_region"] if isinstance(mark, dict) and "inductor_region" in mark else DEFAULT_REGION
        by_id.setdefault(region, set()).add(node)
    return list(by_id.values())


def graph_spec(graph, regions) -> dict:
    """``graph`` as the partitioner sees it: per node its op, whether it is a getitem, its input nodes (indices)
    and its name; the regions as lists of node indices."""
    index = {node: i for i, node in enumerate(graph.nodes)}
    nodes = [[n.op, n.op == "call_function" and n.target is operator.getitem,
              [index[a] for a in n.all_input_nodes], n.name] for n in graph.nodes]
    return {"nodes": nodes, "regions": [sorted(index[n] for n in region) for region in regions]}


def build(spec):
    """The graph of a spec (a GraphModule) and its regions (sets of nodes)."""
    import torch

    graph = torch.fx.Graph()
    nodes = []
    for op, getitem, inputs, name in spec["nodes"]:
        args = tuple(nodes[i] for i in inputs)
        if op == "placeholder":
            node = graph.placeholder(name)
        elif op == "output":
            node = graph.output(args)
        elif op == "get_attr":
            node = graph.create_node("get_attr", name, name=name)
        elif getitem:
            node = graph.call_function(operator.getitem, (args[0], 0) + args[1:])
        else:
            node = graph.call_function(torch.ops.aten.add.Tensor, args)
        node.name = name
        nodes.append(node)
    return _Holder(graph), [{nodes[i] for i in region} for region in spec["regions"]]


class _Holder:
    """What CapabilityBasedPartitioner and propose_partitions read of a GraphModule: its graph and
    named_modules() (get_attr nodes of a random graph or a spec name no real attribute, so no GraphModule is
    made)."""

    def __init__(self, graph):
        self.graph = graph

    def named_modules(self):
        return iter(())


def upstream_partitions(gm, regions) -> list[list]:
    """The partitions this torch's CapabilityBasedPartitioner proposes for each region in turn, as regional
    Inductor runs it: each a list of [node name, node order] in the partition's order."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import create_op_support

    out = []
    for region in regions:
        support = create_op_support(lambda submodules, node, region=region: node in region)
        for p in CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions():
            out.append([[n.name, o] for n, o in dict(p.nodes).items()] if isinstance(p.nodes, dict)
                       else [[n.name, None] for n in p.nodes])
    return out


def linear_partitions(graph, regions) -> list[list]:
    """The same from torch.fx.passes.infra._linear_partitioner, the grouping regional_inductor uses."""
    from torch.fx.passes.infra._linear_partitioner import propose_partitions
    from torch.fx.passes.operator_support import create_op_support

    gm = graph.owning_module or _Holder(graph)
    return [[[n.name, o] for n, o in p.items()] for region in regions
            for p in propose_partitions(gm, create_op_support(lambda submodules, node, region=region: node in region))]


def random_graph(rng: random.Random, size: int):
    """A random graph (a torch.fx.Graph) of about ``size`` ops and its regions."""
    import torch

    graph = torch.fx.Graph()
    values = [graph.placeholder(f"x{i}") for i in range(rng.randint(1, 4))]
    marked_share = rng.choice((0.3, 0.55, 0.85, 0.97))
    window = rng.choice((2, 4, 8, 10**6))  # how far back an op takes its inputs: chains to wide joins
    ids = rng.choice(((None,), (None, 0), (0, 1), (None, 0, 1)))
    regions: dict = {}

    def mark(node, share=marked_share):
        if rng.random() < share:
            regions.setdefault(rng.choice(ids), set()).add(node)

    for _ in range(size):
        recent = values[-window:]
        args = rng.sample(recent, min(len(recent), rng.choice((1, 1, 2, 2, 3, 4))))
        kind = rng.random()
        if kind < 0.15:  # a multi-output op, its getitems, a getitem of a getitem now and then
            node = graph.call_function(torch.ops.aten.split.Tensor, (args[0], 1) + tuple(args[1:]))
            mark(node)
            for k in range(rng.randint(1, 3)):
                item = graph.call_function(operator.getitem, (node, k))
                mark(item, 0.9 if any(node in r for r in regions.values()) else 0.1)
                values.append(item)
                if rng.random() < 0.2:
                    inner = graph.call_function(operator.getitem, (item, 0))
                    mark(inner)
                    values.append(inner)
        elif kind < 0.2:  # a HOP-like call taking a subgraph (get_attr) and operands
            body = graph.create_node("get_attr", f"subgraph_{len(values)}")
            mark(body, 0.3)
            node = graph.call_function(torch.ops.higher_order.cond if hasattr(torch.ops.higher_order, "cond")
                                       else torch.ops.aten.add.Tensor, (body,) + tuple(args))
            mark(node)
            values.append(node)
        else:
            node = graph.call_function(torch.ops.aten.add.Tensor, tuple(args))
            mark(node)
            values.append(node)
    used = {a for n in graph.nodes for a in n.all_input_nodes}
    graph.output(tuple(v for v in values if v not in used))
    return graph, list(regions.values())


def _mark(region):
    return {"compile_with_inductor": {"inductor_region": region}} if region is not None else {
        "compile_with_inductor": 0}


def _hf_model(family: str, layers: int, ids: bool):
    import torch
    import torch.fx.traceback as fx_traceback
    import transformers
    from torch import nn

    class Marked(nn.Module):
        def __init__(self, inner, region):
            super().__init__()
            self.inner, self.region = inner, region

        def forward(self, *args, **kwargs):
            with fx_traceback.annotate(_mark(self.region)):
                return self.inner(*args, **kwargs)

    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
        model = transformers.LlamaForCausalLM(config)
        blocks = [(layer, "self_attn", "mlp") for layer in model.model.layers]
    else:
        config = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=layers, n_head=4,
                                         attn_implementation="eager")
        model = transformers.GPT2LMHeadModel(config)
        blocks = [(block, "attn", "mlp") for block in model.transformer.h]
    for block, attn, mlp in blocks:
        setattr(block, attn, Marked(getattr(block, attn), "attention" if ids else None))
        setattr(block, mlp, Marked(getattr(block, mlp), "mlp" if ids else None))
    model.config.use_cache = False

    def loss(x):
        return model(input_ids=x, labels=x, use_cache=False).loss

    return loss, (torch.randint(0, 64, (2, 16)),)


def _gpt_model(layers: int):
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from regional_inductor import build_model

    model = build_model(layers, 64, 4)

    def loss(x):
        return model(x).pow(2).mean()

    return loss, (torch.randn(2, 16, 64, requires_grad=True),)


def model_graphs(name: str) -> list:
    """The forward and backward graphs (and their HOP subgraphs) AOTAutograd makes of a model:
    ``hf_llama``, ``hf_gpt2`` (2 layers, attention and MLP regions of their own ids) or ``gpt<layers>`` (``gpt24``:
    24 blocks, one default region, as bench/regional_inductor.py marks them)."""
    import torch
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    if name.startswith("gpt"):
        fn, args = _gpt_model(int(name[3:]))
    else:
        fn, args = _hf_model(name.split("_")[1], 2, ids=True)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=aot_autograd(fw_compiler=record, bw_compiler=record), fullgraph=False)
    compiled(*args).backward()
    torch._dynamo.reset()
    out = []
    for gm in graphs:
        out.append(gm)
        out += [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule) and m is not gm]
    return out
