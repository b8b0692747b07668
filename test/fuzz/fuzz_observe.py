"""Run generated annotated programs in this interpreter and write, per program, the ops of every graph.

The fuzzer runs this file twice, under the patched torch (.venv) and under the upstream oracle
(.venv-oracle, torch 2.13.0); each run rebuilds every program from its seed (fuzz_generator.py), runs it
through the seed's capture path and records, per graph (``kind#index``: dynamo, aot_forward,
aot_backward, make_fx_joint, export, export_decomposed), every op with its ``custom`` and whether it is
an ``autograd_backward`` node, or the error the program raised. fuzz_compare.py compares the two files.
It reuses the no-annotation differential's observer (recording backend and compilers, the text
normaliser) and imports nothing else of the project, so it runs unchanged on every release.

    usage: python fuzz_observe.py OUT.json WORKDIR SEED|MODEL/CAPTURE [...]
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import sys
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "differential"), str(HERE.parents[1])]

from differential_observe import Normaliser, Observation, stringify  # noqa: E402
from fuzz_models import program  # noqa: E402

_DYNAMO_OPS = ("call_function", "call_method", "call_module")


class OpsObservation(Observation):
    """The differential's Observation, recording per graph only its ops: (subgraph, target, custom,
    autograd_backward, is_gradient_acc)."""

    def __init__(self, norm: Normaliser):
        super().__init__(norm)
        self.counts: dict[str, int] = {}

    def graph(self, kind: str, gm) -> None:
        from torch_overlay.graph_table import graph_modules

        ops = []
        kinds = _DYNAMO_OPS if kind == "dynamo" else ("call_function",)
        for sub_name, sub in graph_modules(gm):
            for node in sub.graph.nodes:
                if node.op not in kinds:
                    continue
                custom = node.meta.get("custom")
                ops.append([sub_name, stringify(node.target, self.norm),
                            None if custom is None else json.dumps(custom, sort_keys=True, default=repr),
                            bool(node.meta.get("autograd_backward")), bool(node.meta.get("is_gradient_acc"))])
        index = self.counts.get(kind, 0)
        self.counts[kind] = index + 1
        self.graphs.append({"graph": f"{kind}#{index}", "ops": ops})


def _outputs_loss(outs):
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)  # aot_module returns a list
    return sum(o.sum() for o in outs)


def capture(obs: OpsObservation, capture_path: str, model, x) -> None:
    import torch
    import torch.fx.traceback as fx_traceback

    if capture_path == "compile":
        _outputs_loss(torch.compile(model, backend=obs.recording_backend())(x)).backward()
    elif capture_path == "aot_module":
        from functorch.compile import aot_module

        fw, bw = obs.recording_compilers()
        _outputs_loss(aot_module(model, fw_compiler=fw, bw_compiler=bw)(x)).backward()
    elif capture_path == "make_fx":
        from torch.fx.experimental.proxy_tensor import make_fx

        params = dict(model.named_parameters())

        def joint(x, params):
            loss = _outputs_loss(torch.func.functional_call(model, params, (x,)))
            return loss, torch.autograd.grad(loss, [x, *params.values()], allow_unused=True)

        with fx_traceback.preserve_node_meta():
            obs.graph("make_fx_joint", make_fx(joint)(x, params))
    elif capture_path in ("export_strict", "export_nonstrict"):
        ep = torch.export.export(model, (x.detach(),), strict=capture_path == "export_strict")
        obs.graph("export", ep.graph_module)
        obs.graph("export_decomposed", ep.run_decompositions().graph_module)
    else:
        raise ValueError(f"unknown capture path {capture_path!r}")


def run_seed(seed, workdir: Path, norm: Normaliser) -> dict:
    """Run one program: a seed (an int) of the generator or a model program's name (fuzz_models.py)."""
    import torch
    import torch._dynamo

    prog = program(seed)
    module_name = "fuzz_seed_" + "".join(c if c.isalnum() else "_" for c in str(seed))
    path = workdir / f"{module_name}.py"  # a real file: Dynamo and tracebacks read the source lines
    path.write_text(prog.source)
    record = {"seed": seed, "capture": prog.capture, "features": sorted(prog.features),
              "source_sha": hashlib.sha256(prog.source.encode()).hexdigest()[:16],
              "graphs": [], "error": None, "traceback": None}
    obs = OpsObservation(norm)
    torch._dynamo.reset()
    torch.manual_seed(seed if isinstance(seed, int) else 0)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # strict export looks the module up by name
        spec.loader.exec_module(module)
        model = module.Net().train()
        x = torch.randn(4, 8, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            capture(obs, prog.capture, model, x)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        record["error"] = f"{type(e).__name__}: {norm.text(first)[:300]}"
        record["traceback"] = norm.text("".join(traceback.format_exception(e))[-3000:])
    finally:
        torch._dynamo.reset()
    record["graphs"] = obs.graphs
    return record


def main(argv: list[str]) -> int:
    out, workdir, *seeds = argv
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    import torch

    for name in ("torch._dynamo", "torch._logging", "torch"):  # Dynamo's graph-break warnings are noise here
        logging.getLogger(name).setLevel(logging.ERROR)
    norm = Normaliser([])
    result = {"torch": torch.__version__, "programs": {}}
    for seed in seeds:
        result["programs"][seed] = run_seed(int(seed) if seed.lstrip("-").isdigit() else seed, workdir, norm)
        Path(out).write_text(json.dumps(result))  # kept up to date: a crash of the process loses one seed
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
