"""Mutation test of the patch series: does the suite notice when the overlay's
behaviour is broken in a known, plausible way?

usage: .venv/bin/python scripts/mutation_test.py [--only NAME ...]
Builds a scratch copy of .venv's torch (hard links, private copies of every
file the series patches), applies the series there, then for each mutation
below edits one patched file in the scratch (a single textual replacement),
runs the tests that guard that behaviour with the scratch interpreter, and puts
the file back. A mutation the tests still pass is a survivor. Prints one line
per mutation and the survivor count; exits 1 if any survived (or if a mutation
no longer matches the patched source, so the list cannot rot silently).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "overlay"))
from scratch_torch import ScratchTorch  # noqa: E402

FW_BW = "test/functorch/test_aot_fw_bw_annotations.py"
BW_STATE = "test/functorch/test_aot_autograd_backward_state.py"
FX = "test/fx/test_fx_traceback_annotate.py"
PAIRING = "test/oracle/test_oracle_fw_bw_pairing.py"
PRIVATE = "test/oracle/test_oracle_private_api.py"
DYNAMO = "test/dynamo/test_fx_annotate_dynamo.py"
EXPORT_PASSES = "test/export/test_export_custom_meta_passes.py"
EXPORT = "test/export/test_export_annotate.py"
EXPORT_NONSTRICT_META = "test/export/test_export_nonstrict_meta.py"
DYNAMIC = "test/dynamo/test_no_annotation_meta.py"
OUTPUT_VIEWS = "test/functorch/test_aot_output_view_replay.py"
EAGER_SCOPES = "test/inductor/test_eager_annotation_scopes.py"
KERNEL_CACHE = "test/inductor/test_kernel_annotation_cache.py"
STALE_VIEWS = "test/export/test_export_stale_views.py"


@dataclass
class Mutation:
    name: str
    path: str      # torch file, relative to site-packages
    old: str | tuple  # exact text in the patched file (must occur once); a tuple: the release's form is one of them
    new: str | tuple  # with a tuple ``old``, the replacement of each form
    tests: list    # pytest paths that must catch it


MUTATIONS = [
    Mutation("fw->bw copy after dead-code elimination",
             "torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py",
             "    copy_fwd_metadata_to_bw_nodes(fx_g)\n    fx_g.graph.eliminate_dead_code()\n",
             "    fx_g.graph.eliminate_dead_code()\n    copy_fwd_metadata_to_bw_nodes(fx_g)\n", [PAIRING]),
    Mutation("autograd_backward stamped on every node",
             "torch/fx/proxy.py", 'if current_meta.get("autograd_backward", False):', "if True:", [BW_STATE]),
    Mutation("autograd_backward never stamped",
             "torch/fx/proxy.py", 'if current_meta.get("autograd_backward", False):', "if False:", [BW_STATE]),
    Mutation("posthook leaves autograd_backward set",
             "torch/_functorch/_aot_autograd/logging_utils.py",
             "            fx_traceback.reset_grad_fn_seq_nr()\n            fx_traceback._reset_autograd_backward()\n",
             "            fx_traceback.reset_grad_fn_seq_nr()\n", [BW_STATE]),
    Mutation("_set_autograd_backward(False) clears the flag",
             "torch/fx/traceback.py", "    if enable:\n        _mark_autograd_backward()\n",
             "    if enable:\n        _mark_autograd_backward()\n    else:\n        _reset_autograd_backward()\n",
             [BW_STATE, PRIVATE]),
    Mutation("backward custom overwritten instead of merged",
             "torch/_functorch/_aot_autograd/utils.py",
             '            merged = dict(node.meta.get("custom") or ())\n',
             "            merged = {}\n", [FW_BW]),
    Mutation("empty forward custom not copied",
             "torch/_functorch/_aot_autograd/utils.py",
             "        if fwd_custom is not None:\n", "        if fwd_custom:\n", [PAIRING]),
    Mutation("gradient accumulation paired like a grad_fn op",
             "torch/_functorch/_aot_autograd/utils.py",
             '                if not node.meta.get("is_gradient_acc", False):\n',
             "                if True:\n", [FW_BW]),
    Mutation("fw->bw copy walks the root graph only",
             "torch/_functorch/_aot_autograd/utils.py",
             "    for module in fx_g.modules():\n", "    for module in [fx_g]:\n", [FW_BW]),
    Mutation("backward told apart by a missing nn_module_stack",
             "torch/_functorch/_aot_autograd/utils.py",
             '    tag = node.meta.get("partitioner_tag")\n    if tag is not None:\n        return tag == "is_backward"\n'
             '    return bool(node.meta.get("autograd_backward", False))\n',
             '    return "nn_module_stack" not in node.meta\n', [FW_BW]),
    Mutation("fw->bw copy ignores autograd_backward on a graph without partitioner tags",
             "torch/_functorch/_aot_autograd/utils.py",
             '    return bool(node.meta.get("autograd_backward", False))\n', "    return False\n", [BW_STATE]),
    Mutation("set_stack_trace([]) keeps the previous stack trace",
             "torch/fx/traceback.py", '            state.current_meta.pop("stack_trace", None)\n',
             "            pass\n", [BW_STATE]),
    Mutation("annotate under torch.compile refuses a list of pairs",
             "torch/_dynamo/variables/ctx_manager.py",
             "        pairs = [tuple(pair.items) for pair in arg.items]\n",
             "        raise NotImplementedError(arg)\n", [DYNAMO]),
    Mutation("partitioner does not mark recomputed ops",
             "torch/_functorch/partitioners.py",
             '            node.meta["autograd_backward"] = True\n', "            pass\n", [FW_BW]),
    Mutation("node_copy shares custom",
             "torch/fx/graph.py",
             '            result_node.meta["custom"] = copy.copy(result_node.meta["custom"])\n',
             "            pass\n", [FW_BW]),
    Mutation("annotate updates the enclosing dict in place",
             "torch/fx/traceback.py",
             "        merged = dict(outer or ())\n        merged.update(self.annotation)\n        return merged\n",
             "        merged = outer if outer is not None else {}\n        merged.update(self.annotation)\n        return merged\n",
             [FX]),
    Mutation("annotate exits restore what they found (not out-of-order safe)",
             "torch/fx/traceback.py", "            while index < len(blocks):\n", "            while False:\n", [FX]),
    Mutation("tracing state per thread (a thread pool worker loses the caller's node meta)",
             "torch/fx/traceback.py", "def has_preserved_node_meta() -> bool:\n    return should_preserve_node_meta\n",
             "def has_preserved_node_meta() -> bool:\n    import threading\n"
             "    return should_preserve_node_meta and threading.current_thread() is threading.main_thread()\n",
             [FX]),
    Mutation("original_aten key dropped when its op ends (not left as None, as the release does)",
             "torch/fx/experimental/proxy_tensor.py",
             '            fx_traceback.current_meta["original_aten"] = None\n',
             '            fx_traceback.current_meta.pop("original_aten", None)\n', [FX, DYNAMIC]),
    Mutation("autograd_backward left behind as None",
             "torch/fx/traceback.py",
             "        if had_key:\n            current_meta[key] = outer\n        else:\n            current_meta.pop(key, None)",
             "        current_meta[key] = outer", [BW_STATE, FX]),
    Mutation("regenerated views not synced under their view node",
             "torch/_subclasses/functional_tensor.py",
             "                    self._regenerate_views_as_traced(args, kwargs)\n", "", [FW_BW]),
    Mutation("_preserve_node_seq_nr ignored when re-tracing",
             "torch/fx/proxy.py", "            elif fx_traceback._is_preserving_node_seq_nr():\n",
             "            elif False:\n", [BW_STATE]),
    Mutation("backward of a Node no forward node numbers is left unannotated",
             "torch/_functorch/_aot_autograd/utils.py",
             "            fwd_meta = seq_nr_annotations.meta_at(node.meta[\"seq_nr\"])\n",
             "            fwd_meta = None\n", [FW_BW, PAIRING]),
    Mutation("the annotation of the previous Node is taken (the range map is off by one)",
             "torch/fx/traceback.py",
             "        index = bisect.bisect_right(self._starts, seq_nr) - 1\n",
             "        index = bisect.bisect_right(self._starts, seq_nr - 1) - 1\n", [FW_BW]),
    Mutation("the caller's annotation is told by value (a tensor value's __eq__ runs)",
             "torch/fx/traceback.py",
             "        if all(custom[key] is value for key, value in before.items()):\n",
             "        if all(custom[key] == value for key, value in before.items()):\n", [FX]),
    Mutation("one trace state for the process (another thread's trace keeps this one's caller annotation)",
             "torch/fx/traceback.py",
             "_trace_state = threading.local()\n", "_trace_state = type('_State', (), {})()\n", [FX]),
    Mutation("another thread's annotate() notes into this thread's recording",
             "torch/fx/traceback.py",
             "_seq_nr_annotations = threading.local()\n", "_seq_nr_annotations = type('_State', (), {})()\n",
             [FW_BW]),
    Mutation("a view regenerated at an output is not regenerated under its node",
             "torch/_functorch/_aot_autograd/functional_utils.py",
             "        _sync_under_annotated_view_node(t)\n", "        torch._sync(t)\n", [OUTPUT_VIEWS]),
    Mutation("an output view regenerated outside preserve_node_meta() gets no node meta",
             "torch/_functorch/_aot_autograd/functional_utils.py",
             ("    with fx_traceback.preserve_node_meta(), fx_traceback.set_current_replay_node(traced.proxy.node):\n",
              # 2.15.0, at upstream's 88 columns
              "    with (\n        fx_traceback.preserve_node_meta(),\n        fx_traceback.set_current_replay_node"),
             ("    with fx_traceback.set_current_replay_node(traced.proxy.node):\n",
              "    with (\n        fx_traceback.set_current_replay_node"), [OUTPUT_VIEWS]),
    Mutation("a view regenerated inside a block drops the block's custom when the view was taken outside any",
             "torch/fx/proxy.py",
             '                if "custom" in replay_node.meta:\n',
             '                node.meta.pop("custom", None)\n                if "custom" in replay_node.meta:\n',
             [STALE_VIEWS]),
    Mutation("non-strict export records no custom without preserve_node_meta()",
             "torch/fx/experimental/proxy_tensor.py",
             # the rule returns what to record; 2.5.1-2.9.1 store a copy of it
             ("            if custom is not None:\n                node.meta[\"custom\"] = dict(custom)\n",
              "            if custom is not None:\n                node.meta[\"custom\"] = custom\n"),
             ("            if custom is not None:\n                pass\n",
              "            if custom is not None:\n                pass\n"),
             [EXPORT]),
    Mutation("nn_module_stack is the tracer's live module stack",
             "torch/fx/experimental/proxy_tensor.py",
             'node.meta["nn_module_stack"] = self.module_stack.copy()',
             'node.meta["nn_module_stack"] = self.module_stack', [EXPORT_NONSTRICT_META]),
    Mutation("training-IR run_decompositions() drops input and output custom",
             "torch/export/exported_program.py",
             "        _restore_input_and_output_custom(gm, new_graph_signature, saved_custom)\n\n        return",
             "\n        return", [EXPORT_PASSES]),
    Mutation("eager scopes: every graph named forward (the rule kernel_annotations.py shares with them)",
             "torch/_inductor/kernel_annotations.py",
             '    return bool(annotated) and all(n.meta.get("autograd_backward") for n in annotated)\n',
             "    return False\n", [EAGER_SCOPES]),
    Mutation("eager scopes: aot_eager adds them with kernel_annotations off",
             "torch/_dynamo/backends/debugging.py",
             "    if not inductor_config.kernel_annotations:\n        return boxed_nop(fx_g, example_inputs)\n",
             "    if False:\n        return boxed_nop(fx_g, example_inputs)\n", [EAGER_SCOPES]),
    Mutation("eager scopes: a run that raises leaves its scope open",
             "torch/_inductor/eager_annotation_scopes.py",
             '        lines.append(f"    if {handle} is not None:\\n")\n',
             '        lines.append("    if False:\\n")\n', [EAGER_SCOPES]),
    Mutation("eager scopes: aot_eager_decomp_partition records none",
             "torch/_dynamo/backends/debugging.py",
             ("    if not torch._functorch.config.fake_tensor_crossref:\n        return _boxed_nop_with_eager_scopes\n",
              # 2.5.1, which has no get_nop_func
              "            fw_compiler=_boxed_nop_with_eager_scopes,\n            bw_compiler=_boxed_nop_with_eager_scopes,\n"),
             ("    if not torch._functorch.config.fake_tensor_crossref:\n        return boxed_nop\n",
              "            fw_compiler=boxed_nop,\n            bw_compiler=boxed_nop,\n"), [EAGER_SCOPES]),
    Mutation("eager scopes: a compiled region's call may run inside an eager scope",
             "torch/fx/passes/regional_inductor.py",
             ("add_eager_scopes(gm, runs_compiled=_is_marked)\n",
              # 2.10.0+, upstream's regional_inductor
              "add_eager_scopes(gm, runs_compiled=_needs_inductor_compile)\n"),
             ("add_eager_scopes(gm)\n", "add_eager_scopes(gm)\n"), [EAGER_SCOPES]),
    Mutation("kernel annotations: the cache keys leave the annotations out",
             "torch/_inductor/codecache.py",
             "        if kernel_annotations is not None:\n            self.kernel_annotations = kernel_annotations\n",
             "        if False:\n            self.kernel_annotations = kernel_annotations\n", [KERNEL_CACHE]),
]


def write_source(path, text):
    """Write a module's source and drop its bytecode: a same-size edit made within the
    second the bytecode was compiled would otherwise pass the pyc's mtime+size check
    and the old code would run."""
    path.write_text(text)
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink()


def run_tests(scratch, tests):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    proc = subprocess.run([str(scratch.python), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                          cwd=REPO, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="substrings of mutation names to run")
    args = ap.parse_args()
    mutations = [m for m in MUTATIONS if not args.only or any(s in m.name for s in args.only)]
    survivors, stale = [], []
    with tempfile.TemporaryDirectory(prefix="torch-overlay-mutation-") as tmp:
        scratch = ScratchTorch(Path(tmp))
        scratch.run("apply", check=True)
        for m in mutations:
            target = scratch.site / m.path
            original = target.read_text()
            forms = [(o, n) for o, n in (zip(m.old, m.new) if isinstance(m.old, tuple) else [(m.old, m.new)])
                     if original.count(o) == 1]
            if len(forms) != 1:
                stale.append(m.name)
                print(f"STALE     {m.name}: the text to mutate is not in {m.path} exactly once", flush=True)
                continue
            write_source(target, original.replace(*forms[0]))
            start = time.monotonic()
            try:
                rc, last_line = run_tests(scratch, m.tests)
            finally:
                write_source(target, original)
            verdict = "killed" if rc != 0 else "SURVIVED"
            if rc == 0:
                survivors.append(m.name)
            print(f"{verdict:9} {m.name} ({time.monotonic() - start:.0f} s; pytest: {' '.join(last_line)})", flush=True)
    print(f"{len(mutations)} mutations, {len(mutations) - len(survivors) - len(stale)} killed, "
          f"{len(survivors)} survived, {len(stale)} stale")
    return 1 if survivors or stale else 0


if __name__ == "__main__":
    sys.exit(main())
