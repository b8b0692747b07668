"""Forward→backward pairing cases where the result depends on details of the
copy (when it runs, what counts as a forward annotation); runs unchanged under
patched 2.5.1 and upstream and prints, per case, the backward graph's
call_function nodes as [name, target, seq_nr offset, custom], JSON on the last line."""
import json

import torch
import torch.fx.traceback as fx_traceback
from functorch.compile import aot_function, make_boxed_func


def capture(fn, *args):
    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    aot_function(fn, fw_compiler=keep("fw"), bw_compiler=keep("bw"))(*args).backward()
    return graphs["fw"], graphs["bw"]


def rows(gm, base):
    return [[n.name, str(n.target), n.meta.get("seq_nr", base) - base, n.meta.get("custom")]
            for n in gm.graph.nodes if n.op == "call_function"]


class Triple(torch.autograd.Function):
    """Its forward traces a dead op first, under the same grad_fn seq_nr as the
    live one: which annotation the backward gets says whether the copy ran
    before dead-code elimination (upstream: before)."""

    @staticmethod
    def forward(ctx, x):
        with fx_traceback.annotate({"region": "traced-first"}):
            x.cos()
        with fx_traceback.annotate({"region": "live"}):
            return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


def empty_annotation(x):
    with fx_traceback.annotate({}):
        y = x.sin()
    return y.sum()


def index_put_on_view(x, idx):
    """upstream's test_preserve_annotate_replay_view program: an index_put
    through a view, then a view of the result used outside the block"""
    with fx_traceback.annotate({"pp_stage": 0}):
        out = x.new_empty((5, 3))
        out[idx, :] = x
        out = out[:-1]
    return out.cos().sum()


def mul_on_view(x):
    y = x.clone()
    with fx_traceback.annotate({"region": "scale"}):
        y[1:].mul_(2)
    return y.cos().sum()


out = {"torch": torch.__version__}
def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


for name, fn, args in [
        ("dead_first_forward_node", lambda x: Triple.apply(x).sum(), (leaf(3),)),
        ("empty_annotation", empty_annotation, (leaf(3),)),
        ("index_put_on_view", index_put_on_view, (leaf(4, 3), torch.tensor([2, 0, 3, 1]))),
        ("mul_on_view", mul_on_view, (leaf(4, 3),))]:
    fw, bw = capture(fn, *args)
    base = min(n.meta["seq_nr"] for n in fw.graph.nodes if "seq_nr" in n.meta)
    out[name] = {"fw": rows(fw, base), "bw": rows(bw, base)}
print(json.dumps(out))
