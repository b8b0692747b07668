"""Random small annotated programs, reconstructed from a seed alone.

``generate(seed)`` returns a ``Program``: the capture path the seed picks (torch.compile with recording
AOT compilers, aot_module, make_fx of a joint forward+backward, strict or non-strict torch.export), the
Python source of an ``nn.Module`` named ``Net`` whose forward maps a (4, 8) tensor to a tensor or a tuple
of tensors, and the set of shapes (``features``) the source uses. The source is plain text made only with
``random.Random(seed)``: the patched torch and the upstream oracle each call ``generate`` in their own
process and run the very same program; nothing here imports torch.

The shapes are the ones annotation tracing gets wrong most easily: nested ``fx.traceback.annotate``
blocks (dict and list-of-pairs forms), ``annotate_fn`` on helper functions and on submodules' forward,
views and in-place ops on views, non-reentrant activation checkpointing with and without dropout in
training, graph breaks inside an annotated block (also in a nested helper frame; torch.compile only), a
custom autograd.Function whose forward applies another autograd.Function, and outputs that are views of
mutated intermediates.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

CAPTURES = ("compile", "aot_module", "make_fx", "export_strict", "export_nonstrict")
_CAPTURE_WEIGHTS = (3, 1, 1, 1, 1)  # torch.compile is the path with the most graphs (Dynamo, forward, backward)

_KEYS = ("region", "stage", "layer", "tag")
_UNARY = ("h = torch.relu(h)", "h = h.sin()", "h = torch.tanh(h) * 2", "h = h + 1", "h = F.gelu(h)",
          "h = torch.sigmoid(h) * h")
_VIEWS = ("h = h.contiguous().view(2, 16).t().reshape(4, 8)", "h = h.transpose(0, 1).reshape(4, 8)",
          "h = h.unsqueeze(0).squeeze(0).expand(4, 8) * 1", "h = h[:, :4].repeat(1, 2)",
          "h = h.reshape(-1)[:32].view(4, 8)")
_INPLACE_ON_VIEW = ("h[1:].mul_(2)", "h.view(-1)[:5].add_(1)", "h[:, 2:6].relu_()", "h.t()[0].sigmoid_()",
                    "h.narrow(1, 0, 4).add_(h[:, 4:])", "h[:, :4] = h[:, 4:] * 3")


@dataclass
class Program:
    seed: int
    capture: str
    source: str
    features: frozenset = field(default_factory=frozenset)


@dataclass
class _Frame:
    """Where a statement is written: the class whose __init__ gets new layers (None in a helper
    function), whether an annotation is active in this frame or in a caller's, and what may go there."""
    init: list | None
    methods: list | None = None
    annotated_here: bool = False
    annotated_by_caller: bool = False
    breaks_allowed: bool = True  # no graph break inside checkpoint or autograd.Function bodies

    def inner(self, **changes) -> "_Frame":
        values = dict(self.__dict__)
        values.update(changes)
        return _Frame(**values)


class _Writer:
    def __init__(self, seed: int, capture: str, wrap: bool = False):
        self.rng = random.Random(seed)
        self.wrap = wrap  # the whole forward in one annotate block
        self.capture = capture
        self.features: set[str] = set()
        self.top: list[str] = []  # module-level definitions: helpers, autograd.Functions, submodule classes
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def annotation(self) -> str:
        """A literal annotate() argument: a dict (sometimes overlapping an outer key), or a list of pairs."""
        n = self.rng.choice((1, 1, 2))
        pairs = [(self.rng.choice(_KEYS), self.rng.choice((self.rng.randrange(4), f"'{self.fresh('v')}'")))
                 for _ in range(n)]
        if self.rng.random() < 0.12:
            self.features.add("annotate_list_of_pairs")
            return "[" + ", ".join(f"('{k}', {v})" for k, v in pairs) + "]"
        return "{" + ", ".join(f"'{k}': {v}" for k, v in dict(pairs).items()) + "}"

    # --- statements ---------------------------------------------------------------------------------------
    def body(self, frame: _Frame, depth: int, size: int) -> list[str]:
        lines = []
        for _ in range(size):
            lines += self.statement(frame, depth)
        return lines or ["h = h * 1"]

    def statement(self, frame: _Frame, depth: int) -> list[str]:
        choices = ["unary", "unary", "view", "inplace_view"]
        if frame.init is not None:
            choices += ["linear", "dropout"]
        if depth < 3:
            choices += ["annotate", "annotate", "helper", "custom_function"]
            if frame.init is not None:
                choices += ["submodule"] + (["checkpoint"] if frame.breaks_allowed else [])
        if self.capture == "compile" and frame.breaks_allowed:
            # more often where an annotation is active: a break there is what Dynamo must resume correctly
            choices += ["graph_break"] * (1 + 2 * (frame.annotated_here or frame.annotated_by_caller))
        return getattr(self, "_" + self.rng.choice(choices))(frame, depth)

    def _unary(self, frame, depth):
        return [self.rng.choice(_UNARY)]

    def _view(self, frame, depth):
        self.features.add("view")
        return [self.rng.choice(_VIEWS)]

    def _inplace_view(self, frame, depth):
        self.features.add("inplace_view")
        return ["h = h.clone()", self.rng.choice(_INPLACE_ON_VIEW)]

    def _linear(self, frame, depth):
        name = self.fresh("lin")
        frame.init.append(f"self.{name} = nn.Linear(8, 8)")
        return [f"h = self.{name}(h)"]

    def _dropout(self, frame, depth):
        self.features.add("dropout")
        name = self.fresh("drop")
        frame.init.append(f"self.{name} = nn.Dropout(0.25)")
        return [f"h = self.{name}(h)"]

    def _annotate(self, frame, depth):
        self.features.add("annotate_nested" if frame.annotated_here or frame.annotated_by_caller else "annotate")
        inner = self.body(frame.inner(annotated_here=True), depth + 1, self.rng.randint(1, 3))
        return [f"with fx_traceback.annotate({self.annotation()}):"] + _indent(inner)

    def _helper(self, frame, depth):
        """A module-level function, maybe decorated with annotate_fn, called from here (a nested frame)."""
        name = self.fresh("helper")
        decorated = self.rng.random() < 0.5
        if decorated:
            self.features.add("annotate_fn_function")
        caller_annotated = frame.annotated_here or frame.annotated_by_caller
        inner = _Frame(None, annotated_here=decorated, annotated_by_caller=caller_annotated,
                       breaks_allowed=frame.breaks_allowed)
        body = self.body(inner, depth + 1, self.rng.randint(1, 3))
        deco = [f"@fx_traceback.annotate_fn({self.annotation()})"] if decorated else []
        self.top.append("\n".join(deco + [f"def {name}(h):"] + _indent(body + ["return h"])))
        return [f"h = {name}(h)"]

    def _submodule(self, frame, depth):
        """A submodule whose forward may be decorated with annotate_fn."""
        cls, attr = self.fresh("Sub"), self.fresh("sub")
        decorated = self.rng.random() < 0.6
        if decorated:
            self.features.add("annotate_fn_module")
        init: list[str] = []
        methods: list[str] = []
        inner = _Frame(init, methods, annotated_here=decorated,
                       annotated_by_caller=frame.annotated_here or frame.annotated_by_caller,
                       breaks_allowed=frame.breaks_allowed)
        body = self.body(inner, depth + 1, self.rng.randint(1, 3))
        deco = [f"@fx_traceback.annotate_fn({self.annotation()})"] if decorated else []
        self.top.append(_module_class(cls, init, deco + ["def forward(self, h):"] + _indent(body + ["return h"]),
                                      methods))
        frame.init.append(f"self.{attr} = {cls}()")
        return [f"h = self.{attr}(h)"]

    def _checkpoint(self, frame, depth):
        """Non-reentrant activation checkpointing of a method, with dropout inside it in some programs."""
        self.features.add("checkpoint")
        name = self.fresh("ckpt")
        inner = frame.inner(breaks_allowed=False)
        body = self.body(inner, depth + 1, self.rng.randint(1, 3))
        if self.rng.random() < 0.5:
            self.features.add("checkpoint_dropout")
            drop = self.fresh("drop")
            frame.init.append(f"self.{drop} = nn.Dropout(0.3)")
            line = f"h = self.{drop}(h)"
            body = [line] + body if self.rng.random() < 0.5 else body + [line]
        frame.methods.append("\n".join([f"def {name}(self, h):"] + _indent(body + ["return h"])))
        return [f"h = checkpoint(self.{name}, h, use_reentrant=False)"]

    def _custom_function(self, frame, depth):
        """autograd.Function Outer whose forward applies autograd.Function Inner; either may annotate."""
        self.features.add("custom_function_nested")
        inner, outer = self.fresh("Inner"), self.fresh("Outer")
        scale = self.rng.choice((2, 3))
        bw_note = (f"with fx_traceback.annotate({self.annotation()}):" if self.rng.random() < 0.5 else "if True:")
        fw_note = (f"with fx_traceback.annotate({self.annotation()}):" if self.rng.random() < 0.5 else "if True:")
        self.top.append("\n".join([
            f"class {inner}(torch.autograd.Function):",
            "    @staticmethod",
            "    def forward(ctx, x):",
            f"        return x * {scale}",
            "",
            "    @staticmethod",
            "    def backward(ctx, g):",
            f"        {bw_note}",
            f"            return g * {scale}",
            "",
            "",
            f"class {outer}(torch.autograd.Function):",
            "    @staticmethod",
            "    def forward(ctx, x):",
            f"        {fw_note}",
            f"            y = {inner}.apply(x)",
            "        ctx.save_for_backward(y)",
            "        return y.sin()",
            "",
            "    @staticmethod",
            "    def backward(ctx, g):",
            "        (y,) = ctx.saved_tensors",
            f"        return g * y.cos() * {scale}",
        ]))
        return [f"h = {outer}.apply(h)"]

    def _graph_break(self, frame, depth):
        if frame.annotated_here:
            self.features.add("graph_break_in_annotate")
        elif frame.annotated_by_caller:
            self.features.add("graph_break_in_annotate_nested_frame")
        else:
            self.features.add("graph_break")
        return ["torch._dynamo.graph_break()"]

    # --- the program --------------------------------------------------------------------------------------
    def program(self, seed: int) -> Program:
        init: list[str] = []
        methods: list[str] = []
        frame = _Frame(init, methods, annotated_here=self.wrap)
        body = self.body(frame, 0, self.rng.randint(2, 5))
        if self.wrap:
            self.features.add("annotate")
            body = [f"with fx_traceback.annotate({self.annotation()}):"] + _indent(body)
        ret = "return h"
        if self.rng.random() < 0.3:
            self.features.add("output_view_of_mutated")
            mutate = [f"m = h * {self.rng.choice((1, 2))}", self.rng.choice(("m.add_(1)", "m[0].mul_(2)",
                                                                             "m.t().relu_()"))]
            view = self.rng.choice(("m[0]", "m.view(-1)", "m.t()", "m[:, 1:3]"))
            if self.rng.random() < 0.5:
                mutate = [f"with fx_traceback.annotate({self.annotation()}):"] + _indent(mutate + [f"v = {view}"])
            else:
                mutate = mutate + [f"v = {view}"]
            body += mutate
            ret = "return h, v"
        forward = ["def forward(self, x):", "    h = x"] + _indent(body + [ret])
        source = "\n\n\n".join([_HEADER] + self.top + [_module_class("Net", init, forward, methods)]) + "\n"
        return Program(seed, self.capture, source, frozenset(self.features))


_HEADER = """\
import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint"""


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line if line else line for line in "\n".join(lines).split("\n")]


def _module_class(name: str, init: list[str], forward: list[str], methods: list[str]) -> str:
    lines = [f"class {name}(nn.Module):", "    def __init__(self):", "        super().__init__()"]
    lines += ["        " + line for line in init]
    for method in [*methods, "\n".join(forward)]:
        lines += [""] + _indent([method])
    return "\n".join(lines)


def generate(seed: int) -> Program:
    """The program of ``seed``: the same text in every process and on every release."""
    capture = random.Random(f"capture-{seed}").choices(CAPTURES, _CAPTURE_WEIGHTS)[0]
    program = _Writer(seed, capture).program(seed)
    if not any(f.startswith("annotate") for f in program.features):
        # every program annotates something: written again, the same seed, inside one annotate block
        program = _Writer(seed, capture, wrap=True).program(seed)
    return program


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:] or ["0"]:
        p = generate(int(arg))
        print(f"# seed {p.seed}, capture {p.capture}, features {sorted(p.features)}\n{p.source}")
