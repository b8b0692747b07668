"""Programs with nothing annotated that use a view of a mutated tensor, where
functionalization regenerates the view lazily; runs unchanged under any torch
(patched, or a pristine copy of the release) and prints, per case, the code of
the forward and backward graphs AOTAutograd hands to its compilers, JSON on the
last line."""
import json
import warnings

import torch
from functorch.compile import aot_function, make_boxed_func


def recording_compilers(graphs):
    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm.code.strip()
            return make_boxed_func(gm.forward)
        return compiler

    return keep("fw"), keep("bw")


def aot_graphs(fn, *args):
    graphs = {}
    fw, bw = recording_compilers(graphs)
    outs = aot_function(fn, fw_compiler=fw, bw_compiler=bw)(*args)
    sum(o.sum() for o in (outs if isinstance(outs, (tuple, list)) else (outs,))).backward()
    return graphs


def compiled_graphs(fn, *args):
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}
    fw, bw = recording_compilers(graphs)
    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=fw, bw_compiler=bw), fullgraph=True)(*args).sum().backward()
    return graphs


def output_view_of_mutated_alias(a, b):
    # test_aotdispatch's test_input_mutation_aliases_and_output_alias: a and b alias
    a.add_(1)
    return b.view(b.shape)


def inplace_view_of_mutated_alias(a, b, c, d):
    # test_aotdispatch's test_input_mutation_aliases_bases_out_of_order: b and d alias
    b.add_(1)
    d.unsqueeze_(0)
    return a + c + d, b.view(-1)


def views_of_a_mutated_tensor(inp):
    x = inp.clone()
    y = x.view(-1)
    x.mul_(2)
    z = y[1:]  # a view of a stale view
    return z.unsqueeze(0).sin()


def aliased_inputs():
    base = torch.ones(2, 2, requires_grad=True)
    x = base.add(1)
    return x.view(-1), x.view(-1)


def two_aliased_pairs():
    x1 = torch.ones(2, 2, requires_grad=True).add(1)
    x2 = torch.ones(2, 2, requires_grad=True).add(1)
    return x1.view(-1), x2.view(-1), x1.view(-1), x2.view(-1)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    out = {
        "output_view_of_mutated_alias": aot_graphs(output_view_of_mutated_alias, *aliased_inputs()),
        "inplace_view_of_mutated_alias": aot_graphs(inplace_view_of_mutated_alias, *two_aliased_pairs()),
        "views_of_a_mutated_tensor": compiled_graphs(views_of_a_mutated_tensor, torch.randn(4, 3, requires_grad=True)),
    }
print(json.dumps(out))
