"""How much of Inductor's post-grad graphs still names the region the user annotated (issue: annotations reach
what Inductor makes).

Each model is the fuzzer's real model code (test/fuzz/fuzz_models.py: tiny HF LLaMA and GPT-2, timm ViT, each
attention block in ``annotate`` and each MLP in an ``annotate_fn`` call), with the whole forward inside
``annotate({"model": ...})`` as well, so every op the user wrote is annotated. One training step is compiled
with the default Inductor backend on CPU; ``post_grad_custom_post_pass`` sees the forward and backward graphs
after every post-grad pass. Printed per model: call_function nodes, the share that carries ``custom``, and the
targets of those that do not (with ``is_gradient_acc`` marked: the gradient-accumulation adds, which neither
upstream nor the series annotates).

With ``--kernels`` the step is compiled with ``torch._inductor.config.kernel_annotations`` on (the series'
opt-in flag; upstream has none, so there the share is 0 by construction and the option refuses to run) and two more
shares are printed:
- output code: of the kernel calls and extern calls in the wrapper code of the forward and backward graphs, those
  with an ``# Annotation:`` comment above them;
- profiler: of the kernel events of a second, profiled forward+backward step, those inside an ``annotation ...``
  scope. Kernel events are the C++ kernels (``config.cpp.enable_kernel_profile``, which has every kernel record
  its own event) and the extern calls (the ``aten::`` events the compiled wrapper itself runs, under
  ``CompiledFunction`` / ``CompiledFunctionBackward``, less buffer allocations and views).

    .venv/bin/python bench/postgrad_coverage.py --kernels [MODEL ...]   # patched torch only

    .venv/bin/python bench/postgrad_coverage.py [MODEL ...]          # this torch (patched or not)
    .venv-oracle/bin/python bench/postgrad_coverage.py hf_llama_sdpa hf_gpt2_sdpa   # upstream 2.13 (no timm)
"""
from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "fuzz"))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.fx.traceback as fx_traceback  # noqa: E402
from torch._inductor import config as inductor_config  # noqa: E402

from fuzz_models import MODELS, model_program  # noqa: E402
from wrapper_calls import wrapper_calls  # noqa: E402

DEFAULT_MODELS = ["hf_llama_sdpa", "hf_gpt2_sdpa", "timm_vit"]


def build(model: str) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(model_program(f"{model}/compile").source, f"<{model}>", "exec"), namespace)
    net = namespace["Net"]()

    class WholeModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            with fx_traceback.annotate({"model": model}):
                return self.net(x)

    return WholeModel()


def coverage(model: str, kernels: bool = False) -> tuple[int, int, collections.Counter, tuple | None]:
    nodes = []

    def record(graph):
        nodes.extend(n for n in graph.nodes if n.op == "call_function")

    torch._dynamo.reset()
    torch.manual_seed(0)
    module = build(model)
    x = torch.randn(4, 8)
    compiled = torch.compile(module, backend="inductor")
    patches = {"post_grad_custom_post_pass": record, "fx_graph_cache": False}
    shares = None
    if kernels:
        from torch._inductor.utils import run_and_get_code

        patches.update({"kernel_annotations": True, "cpp.enable_kernel_profile": True})
        with inductor_config.patch(patches):
            _, codes = run_and_get_code(lambda: compiled(x).backward())
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                compiled(x).backward()
        shares = (output_code_share(codes), profiler_share(prof.events()))
    else:
        with inductor_config.patch(patches):
            compiled(x).backward()
    missing = collections.Counter(
        f"{n.target}{' (is_gradient_acc)' if n.meta.get('is_gradient_acc') else ''}"
        for n in nodes if not n.meta.get("custom"))
    return len(nodes), len(nodes) - sum(missing.values()), missing, shares


_ALLOCATION = {"empty", "empty_strided", "as_strided", "view", "reshape", "_reshape_alias", "resize_",
               "_unsafe_view", "set_", "alias", "lift_fresh"}


def output_code_share(codes: list[str]) -> tuple[int, int]:
    """(kernel and extern calls in the wrapper code, those with an ``# Annotation:`` comment above them)."""
    calls = list(wrapper_calls(codes))
    return len(calls), sum(comment is not None for _, comment in calls)


def profiler_share(events) -> tuple[int, int, int, collections.Counter]:
    """(kernel events of the profiled step, those inside an annotation scope, how many of all are C++ kernels,
    names of those outside)."""
    total = inside = cpp = 0
    outside = collections.Counter()
    for event in events:
        ancestors = []
        parent = event.cpu_parent
        while parent is not None:
            ancestors.append(parent.name)
            parent = parent.cpu_parent
        own = [a for a in ancestors if not a.startswith("annotation ")]
        in_compiled = any(a.startswith("CompiledFunction") for a in own)
        if "cpp_fused_" in event.name:
            kernel = True
            cpp += 1
        else:
            # an extern call: an aten op the compiled wrapper runs itself (its nearest non-scope parent is no op)
            kernel = (in_compiled and event.name.startswith("aten::") and own and not own[0].startswith("aten::")
                      and event.name[len("aten::"):] not in _ALLOCATION)
        if not kernel:
            continue
        total += 1
        if any(a.startswith("annotation ") for a in ancestors):
            inside += 1
        else:
            outside[event.name] += 1
    return total, inside, cpp, outside


def main(argv: list[str]) -> int:
    kernels = "--kernels" in argv
    models = [m for m in argv if m != "--kernels"] or DEFAULT_MODELS
    print(f"torch {torch.__version__}")
    if kernels and not hasattr(inductor_config, "kernel_annotations"):
        raise SystemExit(f"torch {torch.__version__} has no torch._inductor.config.kernel_annotations: "
                         "its output code and profiler events name no region (0 by construction)")
    head = "| model | post-grad nodes | with custom | share | without custom |"
    if kernels:
        head += " output-code calls annotated | profiler kernel events annotated | kernel events outside |"
    print(head)
    print("|---" * head.count(" |") + "|")
    for model in models:
        if model not in MODELS:
            raise SystemExit(f"unknown model {model!r}: one of {', '.join(MODELS)}")
        total, annotated, missing, shares = coverage(model, kernels)
        without = ", ".join(f"{target} x{count}" for target, count in sorted(missing.items())) or "none"
        row = f"| {model} | {total} | {annotated} | {annotated / total:.1%} | {without} |"
        if shares:
            (calls, named), (events, inside, cpp, outside) = shares
            row += (f" {named} / {calls} ({named / max(calls, 1):.1%}) | {inside} / {events}"
                    f" ({inside / max(events, 1):.1%}; {cpp} C++ kernels, {events - cpp} extern calls) |"
                    f" {', '.join(f'{n} x{c}' for n, c in sorted(outside.items())) or 'none'} |")
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
