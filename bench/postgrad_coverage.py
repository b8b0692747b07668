"""How much of Inductor's post-grad graphs still names the region the user annotated (issue: annotations reach
what Inductor makes).

Each model is the fuzzer's real model code (test/fuzz/fuzz_models.py: tiny HF LLaMA and GPT-2, timm ViT, each
attention block in ``annotate`` and each MLP in an ``annotate_fn`` call), with the whole forward inside
``annotate({"model": ...})`` as well, so every op the user wrote is annotated. One training step is compiled
with the default Inductor backend on CPU; ``post_grad_custom_post_pass`` sees the forward and backward graphs
after every post-grad pass. Printed per model: call_function nodes, the share that carries ``custom``, and the
targets of those that do not (with ``is_gradient_acc`` marked: the gradient-accumulation adds, which neither
upstream nor the series annotates).

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


def coverage(model: str) -> tuple[int, int, collections.Counter]:
    nodes = []

    def record(graph):
        nodes.extend(n for n in graph.nodes if n.op == "call_function")

    torch._dynamo.reset()
    torch.manual_seed(0)
    module = build(model)
    with inductor_config.patch(post_grad_custom_post_pass=record, fx_graph_cache=False):
        torch.compile(module, backend="inductor")(torch.randn(4, 8)).backward()
    missing = collections.Counter(
        f"{n.target}{' (is_gradient_acc)' if n.meta.get('is_gradient_acc') else ''}"
        for n in nodes if not n.meta.get("custom"))
    return len(nodes), len(nodes) - sum(missing.values()), missing


def main(argv: list[str]) -> int:
    models = argv or DEFAULT_MODELS
    print(f"torch {torch.__version__}")
    print("| model | post-grad nodes | with custom | share | without custom |")
    print("|---|---|---|---|---|")
    for model in models:
        if model not in MODELS:
            raise SystemExit(f"unknown model {model!r}: one of {', '.join(MODELS)}")
        total, annotated, missing = coverage(model)
        without = ", ".join(f"{target} x{count}" for target, count in sorted(missing.items())) or "none"
        print(f"| {model} | {total} | {annotated} | {annotated / total:.1%} | {without} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
