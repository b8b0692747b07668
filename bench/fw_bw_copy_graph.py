"""A synthetic AOTAutograd-style joint graph for benchmarking forward->backward metadata copy.

build_joint_graph(n_nodes, n_subgraphs, seed) returns a torch.fx.GraphModule: a root graph
plus n_subgraphs nested GraphModules (submodules reached through get_attr nodes, as HOP
subgraphs are), about n_nodes aten call_function nodes in all.  Each graph holds a forward
half and a backward half:

- forward nodes: seq_nr, nn_module_stack, source_fn_stack and (for most) a "custom" dict that
  is unique per node; a few reuse the previous node's seq_nr (ops that created no grad_fn);
- backward nodes: partitioner_tag="is_backward", autograd_backward=True and the seq_nr of a
  forward node, one in ten in another graph; some carry a backward-only "custom" key;
- gradient accumulation nodes (is_gradient_acc=True) with an arbitrary forward seq_nr.

Only plain torch.fx Graph/GraphModule API and random.Random are used, so torch 2.5.1 and 2.13
build the identical graph for the same arguments (graph_digest() lets callers check that).
"""
import hashlib
import random

import torch

aten = torch.ops.aten
FWD_OPS = [aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor]
BW_OPS = [aten.mul.Tensor, aten.neg.default, aten.add.Tensor]
CROSS_GRAPH = 0.1  # share of backward nodes whose forward node sits in another graph
NO_GRAD_FN = 0.05  # share of forward nodes repeating the previous seq_nr
GRAD_ACC = 0.03  # share of backward nodes that are gradient accumulations
NO_CUSTOM = 0.25  # share of forward nodes outside any annotate() region
BW_CUSTOM = 0.3  # share of backward nodes with a custom key of their own


def _plan_seq_nrs(n_graphs, n_fwd, rng):
    """Per graph, the seq_nr of each forward node (globally increasing, a few repeated)."""
    plan, seq_nr = [], 0
    for _ in range(n_graphs):
        nrs = []
        for i in range(n_fwd):
            if not (i and rng.random() < NO_GRAD_FN):
                seq_nr += 1
            nrs.append(seq_nr)
        plan.append(nrs)
    return plan


def _build_graph(g_idx, plan, n_bw, rng):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    grad = graph.placeholder("grad_out")
    fwd_nodes, prev = [], x
    for i, seq_nr in enumerate(plan[g_idx]):
        op = FWD_OPS[i % len(FWD_OPS)]
        node = graph.call_function(op, (prev, x))
        layer = f"layers.{g_idx}.block{i // 8}"
        node.meta.update(
            seq_nr=seq_nr,
            nn_module_stack={
                f"L__self___layers_{g_idx}": (f"L['self'].layers[{g_idx}]", "Block"),
                f"L__self___{layer.replace('.', '_')}": (layer, "torch.nn.Linear"),
            },
            source_fn_stack=[(node.name, op)],
        )
        if rng.random() >= NO_CUSTOM:
            node.meta["custom"] = {"ac_region_id": i // 16, "fwd_op": f"{g_idx}:{i}"}
        fwd_nodes.append(node)
        prev = node

    all_nrs = plan[g_idx]
    prev = grad
    for j in range(n_bw):
        if j and rng.random() < GRAD_ACC:
            node = graph.call_function(aten.add.Tensor, (prev, grad))
            # the counter's value at that point: any forward seq_nr, unrelated to this add
            node.meta.update(seq_nr=rng.choice(all_nrs), is_gradient_acc=True)
        else:
            src = g_idx
            if len(plan) > 1 and rng.random() < CROSS_GRAPH:
                src = rng.choice([k for k in (g_idx - 1, g_idx + 1) if 0 <= k < len(plan)])
            op = BW_OPS[j % len(BW_OPS)]
            args = (prev,) if op is aten.neg.default else (prev, rng.choice(fwd_nodes))
            node = graph.call_function(op, args)
            node.meta["seq_nr"] = rng.choice(plan[src])
            if rng.random() < BW_CUSTOM:
                node.meta["custom"] = {"bw_only": j}
        node.meta.update(partitioner_tag="is_backward", autograd_backward=True)
        prev = node
    graph.output((fwd_nodes[-1], prev))
    return graph


def build_joint_graph(n_nodes, n_subgraphs, seed=0):
    rng = random.Random(seed)
    n_graphs = n_subgraphs + 1
    per_graph = max(4, n_nodes // n_graphs)
    n_fwd = per_graph // 2
    plan = _plan_seq_nrs(n_graphs, n_fwd, rng)
    graphs = [_build_graph(g, plan, per_graph - n_fwd, rng) for g in range(n_graphs)]

    holder = torch.nn.Module()
    root_graph = graphs[0]
    first_op = next(n for n in root_graph.nodes if n.op != "placeholder")
    with root_graph.inserting_before(first_op):
        for k, sub in enumerate(graphs[1:]):
            name = f"subgraph_{k}"
            holder.add_module(name, torch.fx.GraphModule(torch.nn.Module(), sub))
            root_graph.get_attr(name)
    return torch.fx.GraphModule(holder, root_graph)


def graph_modules(gm):
    return [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]


def graph_digest(gm):
    """Short hash of structure and input metadata, to check two torch versions built the same graph."""
    h = hashlib.sha1()
    for m in graph_modules(gm):
        for n in m.graph.nodes:
            meta = {k: n.meta.get(k) for k in ("seq_nr", "partitioner_tag", "is_gradient_acc", "custom")}
            h.update(f"{n.op}|{n.name}|{n.target}|{[str(a) for a in n.args]}|{meta}\n".encode())
    return h.hexdigest()[:12]
