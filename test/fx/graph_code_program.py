"""Compile a small annotated model with torch.compile and print, as JSON, what its
forward and backward graph code says about each op: the annotation part of the
summary comment print_readable() writes above it.

Runs unchanged under the patched torch 2.5.1 and under upstream torch (the oracle)
for test_fx_graph_code_annotation.py. Only public torch APIs; the program must not
import the project.
"""
import json
import re
import warnings

import torch
from torch import nn
from torch.fx.traceback import annotate

# A node line of verbose graph code: `name: "f32[3, 4]" = torch.ops.aten.mm.default(...)`.
NODE_LINE = re.compile(r'^\s*\w+(?:: "[^"]*")? = (torch\.ops\.[\w.]+)\(')
# 2.14+ starts a backward node's stack trace with "Backward of forward node: "
ANNOTATION = re.compile(r"^\s*# (Annotation: .*?) (?:Backward of forward node: )?(?:File: |No stacktrace found)")

LONG_PLAN = "stage0:" + "layer" * 12  # 67 characters: printed cut to 40 and "..."


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        with annotate({"region": "encoder", "plan": LONG_PLAN, "ids": list(range(20))}):
            h = torch.relu(self.encoder(x))
        with annotate({"region": "head"}):
            out = self.head(h)
        return out.sum()


def annotated_ops(code: str):
    """[(aten target, annotation text or None)] for each op line of ``code``, in order."""
    out, current = [], None
    for line in code.splitlines():
        if line.strip().startswith("#"):
            m = ANNOTATION.match(line)
            current = m.group(1) if m else None
        elif m := NODE_LINE.match(line):
            out.append((m.group(1), current))
    return out


def graph_code():
    """{"forward": code, "backward": code}: print_readable() of the graphs AOTAutograd
    hands to its compilers when Model is compiled and run forward and backward."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    code = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            code[kind] = gm.print_readable(print_output=False)
            return make_boxed_func(gm.forward)
        return compiler

    torch.manual_seed(0)
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(Model(), backend=backend, fullgraph=True)(torch.randn(3, 4)).backward()
    return code


def main():
    code = graph_code()
    print(json.dumps({"torch": torch.__version__, **{k: annotated_ops(v) for k, v in code.items()}}))


if __name__ == "__main__":
    main()
