"""Run corpus programs in this interpreter and write what they did as JSON.

The no-annotation differential runs this file twice, once with the pristine torch of a release and once
with the patched one, and compares the two JSON files (differential_compare.py). Everything recorded here
is text or a digest, made comparable across two processes and two install locations: memory addresses,
object ids and site-packages paths are replaced by placeholders, and line numbers inside the files the
series patches are blanked (a patch moves torch's own lines; that is not a behaviour). Nothing else is
normalised, so any other change shows.

    usage: python differential_observe.py OUT.json PATCHED_FILES.txt PROGRAM [PROGRAM ...]
"""
from __future__ import annotations

import enum
import hashlib
import importlib
import importlib.util
import json
import logging
import re
import sys
import types
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_LONG_ID = re.compile(r"(?<!\d)\d{9,}(?!\d)")  # id() values in guard text (___check_obj_id(x, 1403...))
_SITE = re.compile(r"[^\s'\"(]*/site-packages/")
# Process-wide counters that guard text shows: CPython's dict versions (bumped by every dict write in the
# process) and the suffix Dynamo numbers its builtins-dict globals with (bumped by every frame compiled before).
_DICT_VERSION = re.compile(r"(___dict_version\([^)]*\) == )\d+")
_BUILTINS_DICT = re.compile(r"__builtins_dict___\d+")
# A leaf guard's comment names one of the user lines that installed it: when several lines install the same
# guard, Dynamo keeps one picked in set order of objects hashed by identity, which differs from one run to
# the next even with a fixed PYTHONHASHSEED (seen on 2.9.1: GPT-2's LAMBDA_GUARD and DICT_CONTAINS lines).
# The guard itself is compared; its comment is not.
_GUARD_LATENCY = re.compile(r"(Guard eval latency = )[\d.]+( us)")  # a timing (2.10+)
_LEAF_GUARD_COMMENT = re.compile(r"^([| ]*\+- [A-Z_]+: .*?)\s+# .*$", re.M)
_LEAF_GUARD = re.compile(r"^(?P<prefix>[| ]*\+- )(?P<kind>[A-Z_]+):")  # a guard line (not a GuardManager)


def _leaf_guards_in_order(text: str) -> str:
    """Guard tree text with each run of sibling leaf guards of one kind sorted: Dynamo installs some of them
    (DICT_CONTAINS of config attributes) in set order, which changes from one process to the next."""
    lines, out, run, key = text.split("\n"), [], [], None
    for line in lines + [None]:
        m = _LEAF_GUARD.match(line) if line is not None else None
        this = (m.group("prefix"), m.group("kind")) if m else None
        if this is not None and this == key:
            run.append(line)
            continue
        out += sorted(run)
        run, key = ([line], this) if this is not None else ([], None)
        if this is None and line is not None:
            out.append(line)
    return "\n".join(out)


class Normaliser:
    """Turns recorded text into text that two installs of one release can compare."""

    def __init__(self, patched_files: list[str]):
        # "torch/fx/proxy.py", line 123  /  torch/fx/proxy.py:123  /  fx/proxy.py:123 (Dynamo's short form)
        forms = {f for p in patched_files for f in (p, p.removeprefix("torch/"))}
        names = "|".join(re.escape(p) for p in sorted(forms, key=len, reverse=True)) or "(?!x)x"
        self._patched_line = re.compile(rf"((?:{names}))(\", line |:)\d+")

    def text(self, s: str) -> str:
        # Paths lose their site-packages folder: the pristine copy and .venv are two folders, and Dynamo
        # shortens a path relative to torch's folder, so the same file prints differently from each.
        s = _SITE.sub("", s)
        s = self._patched_line.sub(r"\1\2<line of a patched file>", s)
        s = _ADDRESS.sub("0x<address>", s)
        s = _DICT_VERSION.sub(r"\1<dict version>", s)
        s = _BUILTINS_DICT.sub("__builtins_dict___<n>", s)
        return _LONG_ID.sub("<id>", s)


def tensor_digest(t) -> str:
    """dtype, shape and the bytes of a real tensor: equal digests mean bitwise equal values."""
    import torch

    t = t.detach().contiguous().cpu()
    data = t.reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t.reshape(-1)
    return f"{t.dtype}{tuple(t.shape)}:" + hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


def stringify(value, norm: Normaliser, depth: int = 0) -> str:
    """A stable text for a node meta value (fake tensors by dtype/shape/stride, nodes by name, callables by
    qualified name, containers element by element)."""
    import torch

    if depth > 6:
        return "..."
    if isinstance(value, torch.fx.Node):
        return f"%{value.name}"
    if isinstance(value, torch.Tensor):
        try:
            shape = tuple(str(s) for s in value.shape)
            stride = tuple(str(s) for s in value.stride()) if value.layout == torch.strided else ()
        except Exception:  # sparse, nested, ...
            shape, stride = "?", "?"
        return f"{type(value).__name__}({value.dtype}, {shape}, {stride}, {value.device}, rg={value.requires_grad})"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"{type(value).__name__}({value})"
    if type(value).__name__ == "TensorMetadata" and getattr(value, "memory_format", None) is not None:
        # shape_prop picks memory_format as the first format of a *set* the strides fit; for a layout that fits
        # several (N, C, 1, 1) the pick follows the set's iteration order, which differs between processes.
        # It is derived from shape and stride, which stay compared.
        value = value._replace(memory_format="<derived from shape and stride>")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stringify(k, norm, depth + 1)}: {stringify(v, norm, depth + 1)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(stringify(v, norm, depth + 1) for v in value)
        return f"{type(value).__name__}[{inner}]"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, type) or isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    if isinstance(value, str):
        return norm.text(value)
    try:
        return norm.text(repr(value))
    except Exception as e:  # a repr that raises is recorded, not fatal
        return f"<repr raised {type(e).__name__}>"


def graph_record(kind: str, gm, norm: Normaliser) -> dict:
    """Graph code (plain and readable) and every node's meta, key by key, of ``gm`` and its subgraphs."""
    from torch_overlay.graph_table import graph_modules

    nodes = []
    for sub_name, sub in graph_modules(gm):
        for node in sub.graph.nodes:
            nodes.append({
                "graph": sub_name, "name": node.name, "op": node.op, "target": stringify(node.target, norm),
                "meta": {str(k): stringify(v, norm) for k, v in node.meta.items()},
            })
    try:
        readable = gm.print_readable(print_output=False)
    except Exception as e:
        readable = f"<print_readable raised {type(e).__name__}: {e}>"
    return {"kind": kind, "code": norm.text(gm.code), "readable": norm.text(readable), "nodes": nodes}


class _ListHandler(logging.Handler):
    def __init__(self, records: list):
        super().__init__()
        self.records = records

    def emit(self, record):
        try:
            self.records.append(record.getMessage())
        except Exception as e:
            self.records.append(f"<log record raised {type(e).__name__}>")


class Observation:
    """What one program did: results, graphs, guards, recompiles, counters, warnings, its error."""

    def __init__(self, norm: Normaliser):
        self.norm = norm
        self.results: dict[str, str] = {}
        self.graphs: list[dict] = []
        self.guards: list[str] = []
        self.recompiles: list[str] = []

    # --- used by the programs ---
    def result(self, name: str, value) -> None:
        """Record a result bitwise: a tensor, a dict/list of tensors, or any other value by its text."""
        import torch

        if isinstance(value, torch.Tensor):
            self.results[name] = tensor_digest(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.result(f"{name}.{k}", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self.result(f"{name}[{i}]", v)
        elif isinstance(value, bytes):
            self.results[name] = "bytes:" + hashlib.sha256(value).hexdigest()[:16]
        else:
            self.results[name] = self.norm.text(repr(value))

    def grads(self, name: str, module) -> None:
        for pname, p in module.named_parameters():
            self.result(f"{name}.{pname}", p.grad if p.grad is not None else "no grad")

    def graph(self, kind: str, gm) -> None:
        self.graphs.append(graph_record(kind, gm, self.norm))

    def recording_backend(self):
        """A torch.compile backend: records the Dynamo graph, then aot_eager with recording compilers."""
        from torch._dynamo.backends.common import aot_autograd

        def compiler(kind):
            def record(gm, example_inputs):
                self.graph(kind, gm)
                return gm.forward
            return record

        aot = aot_autograd(fw_compiler=compiler("aot_forward"), bw_compiler=compiler("aot_backward"),
                           inference_compiler=compiler("aot_inference"))

        def backend(gm, example_inputs):
            self.graph("dynamo", gm)
            return aot(gm, example_inputs)
        return backend

    def recording_compilers(self):
        """fw/bw compilers for aot_function / aot_module that record each graph."""
        def compiler(kind):
            def record(gm, example_inputs):
                self.graph(kind, gm)
                return gm
            return record
        return compiler("aot_forward"), compiler("aot_backward")


def _watch_dynamo_logs(guards: list, recompiles: list) -> list:
    """Guard trees and recompile reasons as Dynamo logs them (TORCH_LOGS=guards,recompiles)."""
    import torch._logging

    torch._logging.set_logs(guards=True, recompiles=True)
    attached = []
    for artifact, sink in (("guards", guards), ("recompiles", recompiles)):
        logger = logging.getLogger(f"torch._dynamo.guards.__{artifact}")
        handler = _ListHandler(sink)
        logger.addHandler(handler)
        attached.append((logger, handler))
    for name in ("torch._dynamo", "torch._logging", "torch"):  # the stderr copies are noise here
        for h in logging.getLogger(name).handlers:
            h.setLevel(logging.CRITICAL + 1)
    return attached


def run_program(name: str, norm: Normaliser) -> dict:
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    import no_annotation_corpus

    program = no_annotation_corpus.PROGRAMS[name]
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    obs = Observation(norm)
    attached = _watch_dynamo_logs(obs.guards, obs.recompiles)
    error = None
    missing = [m for m in program.needs if importlib.util.find_spec(m) is None]
    if missing:
        error = f"not run: {', '.join(missing)} not installed (scripts/setup.sh installs the pinned versions)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if not missing:
                program.run(obs)
        except Exception as e:
            error = f"{type(e).__module__}.{type(e).__qualname__}: {norm.text(str(e))}"
    for logger, handler in attached:
        logger.removeHandler(handler)
    torch._dynamo.reset()
    warning_texts = sorted({f"{w.category.__name__}: {norm.text(str(w.message))}" for w in caught})
    return {
        "results": obs.results,
        "graphs": obs.graphs,
        "guards": [_leaf_guards_in_order(_GUARD_LATENCY.sub(r"\1<timing>\2", _LEAF_GUARD_COMMENT.sub(r"\1", norm.text(g))))
                   for g in obs.guards],
        "recompiles": [norm.text(r) for r in obs.recompiles],
        # A counter's key may name an object (Dynamo's graph-break reasons show a function's repr).
        "counters": {k: dict(sorted((norm.text(str(r)), n) for r, n in v.items())) for k, v in sorted(counters.items())
                     if k not in no_annotation_corpus.TIMING_COUNTERS},
        "warnings": warning_texts,
        "error": error,
    }


def module_surfaces(patched_files: list[str]) -> dict[str, list[str]]:
    """dir() of every module the series touches (names only), as a consumer of the release sees them."""
    surfaces = {}
    for path in patched_files:
        if not path.endswith(".py"):
            continue
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        try:
            surfaces[module] = sorted(dir(importlib.import_module(module)))
        except Exception as e:
            surfaces[module] = [f"<import raised {type(e).__name__}>"]
    return surfaces


def main(argv: list[str]) -> int:
    out, patched_list, *programs = argv
    patched_files = [p for p in Path(patched_list).read_text().split() if p]
    norm = Normaliser(patched_files)
    import torch

    record = {"torch": torch.__version__, "torch_file": norm.text(torch.__file__), "programs": {}}
    for name in programs:
        record["programs"][name] = run_program(name, norm)
    record["modules"] = module_surfaces(patched_files)
    Path(out).write_text(json.dumps(record, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
