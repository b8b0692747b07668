"""What torch._inductor.config.kernel_annotations gives Triton kernels, checked on a GPU (issue: annotations
reach what Inductor makes and what the profiler records).

CI has no GPU, so the tests check the flag on Inductor's C++ kernels only. This script is the one GPU check:
scripts/gpu_check.sh runs it on a lent GPU machine, first on the pristine torch there (``--save``: the output
code the release writes) and then on the same torch with the series applied (``--pristine``: compares). Models:

- ``block``: the two-region block of the kernel-annotation tests (test/annotated_block.py: "attention" =
  scale and softmax, "mlp"), annotated and not;
- ``flex``: the demo model (torch_overlay.demo: flex_attention with a score_mod and a block mask in region
  "attention", the head in "head"), whose backward torch >= 2.11 runs only on a GPU.

Per model and flag setting, one forward+backward step under torch.compile (Inductor, fresh caches):
- post-grad: call_function nodes of the forward and backward post-grad graphs, and those carrying ``custom``;
- code: kernel calls (``triton_*.run``, ``extern_kernels.*``, ``aten.*``) in the wrapper code, those with an
  ``# Annotation:`` comment above them, and the regions the comments name;
- profiler (a second step, CPU and CUDA activities, from the Chrome trace): the GPU kernels of the step, those
  launched inside an ``annotation ...`` record_function scope, the regions of those scopes, and the regions of
  the ``gpu_user_annotation`` spans Kineto mirrors onto the GPU timeline (the per-region GPU time).
With the flag off, or on a pristine torch, the output code is compared byte for byte with the pristine run's.

    python3 bench/gpu_kernel_annotations.py --save OUT/pristine.json        # pristine torch
    python3 bench/gpu_kernel_annotations.py --pristine OUT/pristine.json    # the series applied
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import difflib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "test")]

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.fx.traceback as fx_traceback  # noqa: E402
from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code  # noqa: E402

from annotated_block import AnnotatedBlock  # noqa: E402
from wrapper_calls import wrapper_calls  # noqa: E402

def block_model(device, annotated):
    regions = {"scale": {"region": "attention"}, "attention": {"region": "attention"}, "mlp": {"region": "mlp"}}
    torch.manual_seed(0)
    return AnnotatedBlock(regions, annotated).to(device), (torch.randn(2, 8, 16, device=device),)


def flex_model(device, annotated):
    """flex_attention (a score_mod and a causal block mask) in region "attention", a head in "head"; the
    demo's layout with a head dimension Inductor's flex lowering takes (at least 16)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    heads, head_dim, seq = 2, 16, 256

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx)

    class FlexBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(heads * head_dim, 3 * heads * head_dim)
            self.head = torch.nn.Linear(heads * head_dim, 4)
            self.block_mask = create_block_mask(causal, 1, 1, seq, seq, device=device)

        def region(self, name):
            return fx_traceback.annotate({"region": name}) if annotated else contextlib.nullcontext()

        def forward(self, x):
            b, s, _ = x.shape
            with self.region("attention"):
                q, k, v = self.qkv(x).view(b, s, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
                out = flex_attention(q, k, v, score_mod=relative_bias, block_mask=self.block_mask)
            with self.region("head"):
                return self.head(torch.relu(out.transpose(1, 2).reshape(b, s, -1)))

    torch.manual_seed(0)
    return FlexBlock().to(device), (torch.randn(2, seq, heads * head_dim, device=device),)


def comparable(code):
    """The output code less what differs between two runs of one torch: the fresh cache folder in kernel paths,
    and the process-wide count of AOTAutograd compilations in the header (the patched run compiles once more
    before the flex model: the flag-on run of the block)."""
    code = re.sub(r"/tmp/[\w.-]+/", "<cache>/", code)
    return re.sub(r"# AOT ID: \['\d+_", "# AOT ID: ['N_", code)


def regions_of(text):
    """The region values an annotation comment or scope name mentions."""
    return set(re.findall(r"region'?\"?[:=] ?['\"]([\w ]+)['\"]", text))


def code_facts(codes):
    calls = annotated = 0
    regions = set()
    unannotated = collections.Counter()
    for kernel, comment in wrapper_calls(codes):
        calls += 1
        if comment is None:
            unannotated[kernel] += 1
        else:
            annotated += 1
            regions |= regions_of(comment)
    return {"calls": calls, "annotated": annotated, "regions": sorted(regions),
            "unannotated": dict(sorted(unannotated.items()))}


def trace_facts(trace):
    """GPU kernels of the profiled step and the annotation scopes around their launches (matched by the
    launch's correlation id), and the regions of the GPU-side mirrored spans."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    scopes = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("annotation ")]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    inside = 0
    per_region = collections.Counter()
    outside = collections.Counter()
    for kernel in kernels:
        launch = launches.get(kernel.get("args", {}).get("correlation"))
        around = [s for s in scopes if launch is not None and s["tid"] == launch["tid"]
                  and s["ts"] <= launch["ts"] <= s["ts"] + s["dur"]]
        if around:
            inside += 1
            for region in regions_of(around[-1]["name"]):
                per_region[region + (" (backward)" if "(backward)" in around[-1]["name"] else "")] += 1
        else:
            outside[kernel["name"][:60]] += 1
    gpu_spans = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("annotation "):
            for region in regions_of(e["name"]):
                gpu_spans[region + (" (backward)" if "(backward)" in e["name"] else "")] += e["dur"]
    return {"gpu_kernels": len(kernels), "launched_in_scope": inside,
            "kernels_per_region_scope": dict(sorted(per_region.items())),
            "cpu_scope_regions": sorted({r for s in scopes for r in regions_of(s["name"])}),
            "gpu_span_us_per_region": {k: round(v, 1) for k, v in sorted(gpu_spans.items())},
            "outside": dict(sorted(outside.items()))}


def step(build, device, annotated, flag):
    """One compiled forward+backward step (the output code and post-grad nodes), then a profiled one."""
    nodes = []

    def record(graph):
        nodes.extend(n for n in graph.nodes if n.op == "call_function")

    torch._dynamo.reset()
    model, inputs = build(device, annotated)
    settings = {"post_grad_custom_post_pass": record}
    if flag is not None:
        settings["kernel_annotations"] = flag
    with fresh_inductor_cache(), inductor_config.patch(settings):
        compiled = torch.compile(model, backend="inductor")
        _, codes = run_and_get_code(lambda: compiled(*inputs).sum().backward())
        compiled(*inputs).sum().backward()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as prof:
            compiled(*inputs).sum().backward()
            if device == "cuda":
                torch.cuda.synchronize()
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    with_custom = [n for n in nodes if n.meta.get("custom")]
    return codes, {
        "post_grad": {"nodes": len(nodes), "with_custom": len(with_custom),
                      "without": dict(collections.Counter(
                          f"{n.target}{' (is_gradient_acc)' if n.meta.get('is_gradient_acc') else ''}"
                          for n in nodes if not n.meta.get("custom")))},
        "code": code_facts(codes),
        "profiler": trace_facts(trace),
    }


def cuda_graph_facts(flag):
    """mode="reduce-overhead" (CUDA graphs) with the flag: the forward runs and matches eager; a replay runs the
    recorded kernels, not the wrapper's Python, so no scope is expected in a replayed step. Under no_grad: a
    training forward whose backward is pending is not replayed (cudagraph trees fall back to the wrapper)."""
    torch._dynamo.reset()
    model, inputs = block_model("cuda", True)
    with torch.no_grad():
        return _cuda_graph_facts(model, inputs, flag)


def _cuda_graph_facts(model, inputs, flag):
    expected = model(*inputs)
    settings = {} if flag is None else {"kernel_annotations": flag}
    with fresh_inductor_cache(), inductor_config.patch(settings):
        compiled = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            got = compiled(*inputs).clone()
        torch.cuda.synchronize()
        with torch.profiler.profile() as prof:
            compiled(*inputs)
            torch.cuda.synchronize()
    torch._dynamo.reset()
    return {"max_abs_diff": float((got - expected).abs().max()),
            "scopes_in_replayed_step": sum(e.name.startswith("annotation ") for e in prof.events())}


MODELS = {"block": block_model, "flex": flex_model}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", help="pristine torch: write its output code and facts here (JSON)")
    parser.add_argument("--pristine", help="patched torch: compare the flag-off output code with this file")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--code-dir", help="write the output code of each flag-on run here")
    args = parser.parse_args(argv)
    from torch_overlay.demo import flex_device

    if "flex" in args.models and flex_device() != args.device:
        print(f"flex left out: torch {torch.__version__} runs flex_attention's backward on "
              f"{flex_device() or 'no device here'}, not {args.device}")
        args.models.remove("flex")
    has_flag = hasattr(inductor_config, "kernel_annotations")
    print(f"torch {torch.__version__} on {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}; "
          f"kernel_annotations option: {'yes' if has_flag else 'no'}", flush=True)
    runs, failures = {}, {}
    for name in args.models:
        for annotated in (False, True):
            flags = [None] if not has_flag else [False, True] if annotated else [False]
            for flag in flags:
                key = f"{name} annotated={annotated} flag={flag}"
                try:
                    codes, facts = step(MODELS[name], args.device, annotated, flag)
                except Exception as error:  # one model's failure must not hide the others' results
                    failures[key] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                    print(f"== {key}: FAILED {failures[key]}", flush=True)
                    continue
                runs[key] = {"codes": codes, "facts": facts}
                if args.code_dir and key.endswith("flag=True"):
                    Path(args.code_dir, f"code-{name}-flag-on.py").write_text("\n\n# ====\n\n".join(codes))
                print(f"== {key}\n{json.dumps(facts, indent=1)}", flush=True)
    problems = [f"{key}: {why}" for key, why in failures.items()]
    if args.device == "cuda":
        for flag in [None] if not has_flag else [False, True]:
            facts = cuda_graph_facts(flag)
            runs[f"cuda graphs flag={flag}"] = {"codes": [], "facts": facts}
            print(f"== cuda graphs (reduce-overhead) flag={flag}: {facts}", flush=True)
            if facts["max_abs_diff"] > 1e-4:
                problems.append(f"cuda graphs flag={flag}: result differs from eager by {facts['max_abs_diff']}")
    if args.save:
        Path(args.save).write_text(json.dumps({**runs, "failures": failures}, indent=1))
    if args.pristine:
        pristine = json.loads(Path(args.pristine).read_text())
        for key, run in runs.items():
            if key.endswith("flag=True") or key.startswith("cuda graphs"):
                continue
            pristine_key = key.replace("flag=False", "flag=None")
            old = pristine.get(pristine_key)
            if old is None and pristine_key in pristine.get("failures", {}):
                print(f"{key}: the pristine run failed too ({pristine['failures'][pristine_key]})")
            elif old is None:
                problems.append(f"{key}: no pristine run to compare with")
            elif [comparable(c) for c in old["codes"]] != [comparable(c) for c in run["codes"]]:
                problems.append(f"{key}: output code differs from the pristine release's")
                diff = difflib.unified_diff("\n".join(map(comparable, old["codes"])).splitlines(),
                                            "\n".join(map(comparable, run["codes"])).splitlines(),
                                            "pristine", "patched", lineterm="", n=1)
                print("\n".join(list(diff)[:80]))
            else:
                print(f"{key}: output code identical to the pristine release's "
                      f"({sum(len(c) for c in run['codes'])} characters)")
        for key, run in runs.items():
            if not key.endswith("flag=True") or key.startswith("cuda graphs"):
                continue
            facts = run["facts"]
            want = {"block": ["attention", "mlp"], "flex": ["attention", "head"]}[key.split()[0]]
            post = facts["post_grad"]
            print(f"{key}: post-grad {post['with_custom']}/{post['nodes']} (without: {post['without'] or 'none'}), code regions {facts['code']['regions']}"
                  f" ({facts['code']['annotated']}/{facts['code']['calls']} calls), profiler regions "
                  f"{facts['profiler']['cpu_scope_regions']} (GPU kernels launched in a scope "
                  f"{facts['profiler']['launched_in_scope']}/{facts['profiler']['gpu_kernels']}), GPU spans "
                  f"{facts['profiler']['gpu_span_us_per_region']}")
            # the gradient-accumulation adds autograd inserts: neither upstream nor the series annotates them
            # (bench/postgrad_coverage.py counts them the same way)
            if any(not target.endswith("(is_gradient_acc)") for target in post["without"]):
                problems.append(f"{key}: post-grad nodes without custom: {post['without']}")
            if facts["code"]["regions"] != want:
                problems.append(f"{key}: output code names regions {facts['code']['regions']}, not {want}")
            if facts["profiler"]["cpu_scope_regions"] != want:
                problems.append(f"{key}: profiler scopes name {facts['profiler']['cpu_scope_regions']}, not {want}")
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
