"""What a patched torch changes when nothing is annotated: the one data table of allowed differences.

``DOCUMENTED`` holds one row per node-meta key or behaviour that a backported upstream PR itself changes;
README.md's table "What a patched torch changes when nothing is annotated" is checked against it
(test_no_annotation_differential.py). A row allows a difference only below the release where upstream
does the same (``first_upstream``) and only in the shape the PR makes it (``allows``).

``PENDING`` holds known regressions that another fix is under way for, each with its issue item: the
differential reports them apart so they stay visible, and reports an entry that no longer matches
anything (the fix landed: remove the entry). Every other difference is a regression.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


NEVER = "none"  # first_upstream of a row that upstream never does (the series' own private helpers)


def release_tuple(release: str) -> tuple[float, ...]:
    if release == NEVER:
        return (float("inf"),)
    return tuple(int(x) for x in release.split("+")[0].split(".")[:3])


# Backward graphs as AOT autograd hands them to its compiler, and as Inductor has them after its post-grad passes.
BACKWARD_GRAPHS = {"aot_backward", "inductor_post_grad_backward"}


@dataclass(frozen=True)
class Documented:
    key: str  # the node meta key or behaviour
    change: str  # what differs from pristine, for the README
    upstream: str  # the upstream PR(s) that make the change
    patch: str  # the patch of the series that carries it
    first_upstream: str  # the first release where upstream torch itself does it
    allows: Callable  # Difference -> bool: the shape the PR gives the difference
    example_program: str  # a corpus program that shows the difference below first_upstream


def _added(key: str, value: str | None, graphs: set | None = None, also: Callable = lambda d: True):
    def allows(d) -> bool:
        return (d.what == "meta" and d.key == key and d.pristine is None
                and (value is None or d.patched == value)
                and (graphs is None or d.graph in graphs) and also(d))
    return allows


def _regenerated(d) -> bool:
    return d.patched_meta.get("is_functional_regenerated") == "True"


# The random ops functionalize_rng_ops replaces with run_and_save_rng_state under activation checkpointing.
_RNG_OPS = {"native_dropout", "rand_like", "randn_like", "rand", "randn"}
_ATEN_OP = re.compile(r"op='aten\.(\w+)'")  # how stringify renders an OpOverload


def _rng_output(d) -> bool:
    """A meta key the output getitem of a functionalized rng op took from the op (upstream-rng-output-meta)."""
    op = _ATEN_OP.search(d.patched_meta.get("original_aten", ""))
    return (d.what == "meta" and d.pristine is None and d.node.startswith("getitem")
            and op is not None and op.group(1) in _RNG_OPS)


def _from_function_body(d) -> bool:
    """A meta key of an op AOT autograd traced from the forward or backward body of Dynamo's
    autograd_function_apply, which 169528 runs in an fx Interpreter: the op took the body node's meta, whose
    source_fn_stack starts inside the autograd.Function. The backward body's nodes have no partitioner tag."""
    if d.what != "meta" or "autograd.Function" not in d.patched_meta.get("source_fn_stack", ""):
        return False
    if d.key == "partitioner_tag":
        return d.pristine == "is_backward" and d.patched is None
    return d.key in ("stack_trace", "source_fn_stack", "from_node")


DOCUMENTED = [
    Documented(
        "autograd_backward", "`True` on every node traced in the backward (partitioner tag `is_backward`), also "
        "where the partitioner moves it into the forward graph (a weight's transpose for the backward's mm)",
        "180251", "180251-autograd-backward-state", "2.12.1",
        _added("autograd_backward", "True", None, lambda d: d.patched_meta.get("partitioner_tag") == "is_backward"),
        "compile_mlp"),
    Documented(
        "autograd_backward of forward ops in the backward graph", "`True` also on the forward ops the "
        "partitioner or activation checkpointing recomputes in the backward graph",
        "182421", "182421-bw-graph-autograd-backward", "2.13.0",
        _added("autograd_backward", "True", BACKWARD_GRAPHS,
               lambda d: d.patched_meta.get("partitioner_tag") != "is_backward"),
        "checkpoint_compiled_dropout"),
    Documented(
        "is_gradient_acc", "`True` on the gradient-accumulation nodes (`add` of two gradients) of a backward graph",
        "180251 (the flag; upstream sets it in fx/proxy.py from 2.10.0)", "180251-autograd-backward-state", "2.10.0",
        _added("is_gradient_acc", "True", BACKWARD_GRAPHS), "compile_inplace_views"),
    Documented(
        "is_functional_regenerated", "`True` on a view that functionalization regenerates after a mutation",
        "166200",
        "166200-view-replay-annotation", "2.10.0",
        _added("is_functional_regenerated", "True"), "compile_inplace_views"),
    Documented(
        "seq_nr, stack_trace of a regenerated view",
        "the regenerated view's own `seq_nr` and stack trace instead of those of the op that used the view",
        "166200",
        "166200-view-replay-annotation", "2.10.0",
        lambda d: d.what == "meta" and d.key in ("seq_nr", "stack_trace") and _regenerated(d),
        "compile_inplace_views"),
    Documented(
        "fwd_nn_module_stack, fwd_source_fn_stack",
        "copied onto backward nodes before dead-code elimination and by the partitioner's backward tag, so "
        "more backward nodes (functional ops, nodes of HOP subgraphs) carry their forward op's module stack; "
        "gradient-accumulation nodes no longer get one (pristine gave them that of an unrelated forward op); "
        "also a backward node the partitioner moves into the forward graph (Inductor's min-cut partition)",
        "164174, 165202", "164174-fwd-bw-custom, 165202-fwd-bw-subgraphs", "2.10.0",
        lambda d: (d.what == "meta" and d.key in ("fwd_nn_module_stack", "fwd_source_fn_stack")
                   and (d.graph in BACKWARD_GRAPHS or d.patched_meta.get("partitioner_tag") == "is_backward")
                   and (d.pristine is None or (d.patched is None and d.patched_meta.get("is_gradient_acc") == "True"))),
        "compile_mlp"),
    Documented(
        "nn_module_stack of nodes traced with node meta preserved",
        "each node's own copy of the tracer's module stack, where pristine stored the tracer's live dict, "
        "empty once tracing ends (`aot_export_module(pre_dispatch=True)`, non-strict export inside "
        "`preserve_node_meta()`)",
        "159956", "159956-module-stack-copy", "2.9.0",
        lambda d: d.what == "meta" and d.key == "nn_module_stack" and d.pristine == "{}",
        "aot_export_pre_dispatch_stale_views"),
    Documented(
        "meta of a checkpointed random op's output",
        "the forward graph's `getitem` that takes the output of a random op (dropout) replaced by "
        "`run_and_save_rng_state` under activation checkpointing has the op's node meta (`seq_nr`, stack trace, "
        "module stacks, `original_aten`, ...) where pristine gave it none",
        "PR number not identified (partitioners.py functionalize_rng_ops)", "upstream-rng-output-meta", "2.9.0",
        _rng_output, "checkpoint_compiled_dropout"),
    Documented(
        "stack_trace, source_fn_stack, from_node, partitioner_tag of ops traced from an autograd.Function",
        "the ops AOT autograd traces from the forward and backward bodies of Dynamo's `autograd_function_apply` "
        "take the body node's meta: the stack trace and `source_fn_stack` of the line inside the Function "
        "instead of the `apply()` call's, `from_node` naming the body node, and the backward body's ops no "
        "`partitioner_tag` (the body node has none)",
        "169528", "169528-autograd-function-apply-interpreter", "2.10.0", _from_function_body,
        "compile_autograd_function"),
    Documented(
        "custom of the block mask's argsort",
        "`{'fallback_to_eager': True}` on the sort (and its getitems) that flex_attention's `create_block_mask` "
        "traces to order a block mask's columns, so Inductor runs ATen's sort there instead of generating one",
        "182745", "182745-flex-argsort-fallback", "2.13.0",
        _added("custom", "{fallback_to_eager: True}"),  # as stringify writes the dict
        "make_fx_block_mask"),
]


# Names a backported PR adds to a module, with the first upstream release that has them there (read in the
# wheels: unzip -p torch-X.whl torch/fx/traceback.py | grep). test_module_names_are_upstreams checks them
# against the upstream oracle.
UPSTREAM_MODULE_NAMES = {
    "torch.fx.traceback.annotate": "2.10.0",
    "torch.fx.traceback.annotate_fn": "2.10.0",
    "torch.fx.traceback.GRADIENT_ACC_SPECIAL_STACK": "2.10.0",
    "torch.fx.traceback._get_custom_metadata": "2.10.0",
    "torch.fx.traceback.get_current_replay_node": "2.10.0",
    "torch.fx.traceback.set_current_replay_node": "2.10.0",
    "torch._dynamo.variables.FxTracebackAnnotateVariable": "2.10.0",
    "torch._dynamo.variables.ctx_manager.FxTracebackAnnotateVariable": "2.10.0",
    "torch._dynamo.variables.ctx_manager.contextlib": "2.12.1",
    "torch.fx.traceback.Callable": "2.10.0",
    "torch.fx.traceback.TypeVar": "2.10.0",
    "torch.fx.traceback.current_replay_node": "2.10.0",
    "torch.fx.traceback._should_preserve_node_meta": "2.11.0",
    "torch.fx.traceback._preserve_node_seq_nr": "2.11.0",
    "torch.fx.traceback._is_preserving_node_seq_nr": "2.11.0",
    "torch.fx.traceback._get_ordered_seq_nr_groups": "2.12.1",
    "torch.fx.traceback._mark_autograd_backward": "2.12.1",
    "torch.fx.traceback._reset_autograd_backward": "2.12.1",
    "torch.fx.traceback._set_autograd_backward": "2.12.1",
    "torch.autograd.graph.region_activation_memory_budget": "2.13.0",
    "torch.fx.traceback.MEMORY_BUDGET_ANNOTATION_KEY": "2.13.0",
    "torch.fx.traceback._get_memory_budget_annotation": "2.13.0",
}

DOCUMENTED.append(Documented(
    "module names", "new names in the modules the series touches: upstream's API of the backported PRs "
    "(`annotate`, `annotate_fn`, `set_current_replay_node`, `_set_autograd_backward`, ...) and the imports "
    "upstream's module has too (`fx.traceback.Callable`, `ctx_manager.contextlib`)",
    "163673, 164916, 166200, 172687, 180251", "the backports", "2.12.1",
    lambda d: d.what == "module name added" and UPSTREAM_MODULE_NAMES.get(d.key, "2.13.0") != "2.13.0",
    "(module surface)"))

DOCUMENTED.append(Documented(
    "module names of the memory budget", "`torch.autograd.graph.region_activation_memory_budget`, "
    "`fx.traceback.MEMORY_BUDGET_ANNOTATION_KEY` and its reader `fx.traceback._get_memory_budget_annotation`",
    "185979", "185979-region-memory-budget", "2.13.0",
    lambda d: d.what == "module name added" and UPSTREAM_MODULE_NAMES.get(d.key) == "2.13.0", "(module surface)"))


# The private helpers the series' own code adds to a module where upstream has no such name, each with the
# patches that add it (one of them is in each series that adds the name; test/test_module_surface.py checks
# that the installed series' patch adds it, and that the series adds no other name: no public helper, no
# module-level import upstream's module lacks; a helper imports what it needs inside the function).
LOCAL_PRIVATE_NAMES = {
    # aot_eager's own compiler: boxed_nop, with the eager scopes of kernel_annotations (not in the shared boxed_nop)
    "torch._dynamo.backends.debugging._boxed_nop_with_eager_scopes": ("local-eager-annotation-scopes",),
    # boxed_nop's (and AOTEagerOutputCode's) swap to the boxed codegen, which drops the code's body transformer as
    # the release's does, but with kernel_annotations on keeps the one in which the eager scopes close when a run
    # raises (2.10+: before, boxed_nop runs an fx.Interpreter)
    "torch._dynamo.backends.debugging._use_boxed_codegen": ("local-eager-annotation-scopes",),
    "torch._dynamo.trace_rules._context_decorator_wrapper_code": ("local-dynamo-context-decorator",),
    "torch._dynamo.variables.ctx_manager._ambient_annotation": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._ambient_annotation_is": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._annotation_repr": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._backend_outside_annotations": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._caller_annotation_for_tracing": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._caller_annotation_hidden": ("local-dynamo-ambient-annotation",),
    "torch._dynamo.variables.ctx_manager._annotation_from_variable":
        ("164916-dynamo-annotate", "local-dynamo-annotation-constants"),
    "torch._dynamo.variables.ctx_manager._annotation_value":
        ("164916-dynamo-annotate", "local-dynamo-annotation-constants"),
    "torch._dynamo.variables.ctx_manager._constant_annotation":
        ("164916-dynamo-annotate", "local-dynamo-annotation-constants"),
    "torch._dynamo.variables.ctx_manager._is_sequence_of_pairs":
        ("164916-dynamo-annotate", "local-dynamo-annotation-constants"),
    "torch._dynamo.variables.ctx_manager._annotation_dict": ("local-dynamo-annotation-constants",),
    "torch._dynamo.variables.ctx_manager._key_path": ("local-dynamo-annotation-constants",),
    "torch._dynamo.variables.ctx_manager._annotation_not_constant": ("local-dynamo-annotation-constants",),
    "torch._dynamo.variables.ctx_manager._annotation_as_dict": ("local-dynamo-annotation-constants",),
    # in -constants on 2.10.0-2.14.1, in -pairs on 2.15.0
    "torch._dynamo.variables.ctx_manager._annotation_from_set":
        ("local-dynamo-annotation-constants", "local-dynamo-annotation-pairs"),
    "torch._dynamo.variables.functions._recreate_supported_context_manager": ("local-dynamo-context-decorator",),
    "torch._functorch._aot_autograd.functional_utils._sync_under_annotated_view_node": ("local-view-replay-outputs",),
    "torch._functorch._aot_autograd.logging_utils._graph_tasks_with_callback": ("local-stacktrace-hooks-reset",),
    "torch._functorch._aot_autograd.utils._is_backward_node": ("164174-fwd-bw-custom", "local-fwd-bw-autograd-backward"),
    "torch.export.exported_program._inputs_and_output_by_role": ("local-export-decomp-custom",),
    "torch.export.exported_program._save_input_and_output_custom": ("local-export-decomp-custom",),
    "torch.export.exported_program._restore_input_and_output_custom": ("local-export-decomp-custom",),
    "torch.export.exported_program._own_input_and_output_custom": ("local-export-decomp-custom",),
    "torch.fx.graph._ANNOTATION_VALUE_MAX_CHARS": ("173119-graph-code-annotation",),
    "torch.fx.graph._annotation_summary": ("173119-graph-code-annotation",),
    "torch.fx.traceback._F": ("163673-annotate",),
    "torch.fx.traceback._should_preserve_node_seq_nr": ("172687-preserve-node-seq-nr",),
    "torch.fx.traceback._trace_state": ("local-annotation-entered-in-trace",),
    "torch.fx.traceback._trace_started": ("local-annotation-entered-in-trace",),
    "torch.fx.traceback._annotation_entered_in_trace": ("local-annotation-entered-in-trace",),
    # annotate()'s record of each block it entered, and the open ones by the id of the dict each made current
    "torch.fx.traceback._AnnotationBlock": ("local-annotate-exit-any-order",),
    "torch.fx.traceback._open_annotation_blocks": ("local-annotate-exit-any-order",),
    "torch.fx.traceback._enter_annotation": ("local-annotate-exit-any-order",),
    "torch.fx.traceback._leave_annotation": ("local-annotate-exit-any-order",),
    "torch.fx.traceback._SeqNrAnnotations": ("local-bw-seq-nr-ranges",),
    "torch.fx.traceback._note_current_annotation": ("local-bw-seq-nr-ranges",),
    "torch.fx.traceback._record_seq_nr_annotations": ("local-bw-seq-nr-ranges",),
    "torch.fx.traceback._seq_nr_annotations": ("local-bw-seq-nr-ranges",),
    # the keys torch._dynamo.disable's wrapper writes while exporting (2.10.0+), Dynamo writes them from there
    "torch.fx.traceback._DYNAMO_DISABLE_KEYS": ("local-export-nonstrict-custom",),
    # how many annotate() blocks have been entered (a trace keeps the number it starts at), and what
    # non-strict export records from the current block
    "torch.fx.traceback._annotation_entries": ("local-export-nonstrict-custom",),
    "torch.fx.traceback._user_annotation_to_record": ("local-export-nonstrict-custom",),
    # non-strict export's opt-in around its trace
    "torch.fx.traceback._record_user_annotations": ("local-export-nonstrict-custom",),
    "torch.fx.traceback._records_user_annotations": ("local-export-nonstrict-custom",),
    # 2.5.1-2.13.0: the match's custom, seq_nr and autograd_backward, on the nodes a replacement inserts
    "torch._inductor.pattern_matcher._ANNOTATION_META_KEYS": ("local-inductor-replacement-annotation",),
    "torch._inductor.pattern_matcher._replacement_annotation": ("local-inductor-replacement-annotation",),
    "torch._inductor.pattern_matcher._take_annotation": ("local-inductor-replacement-annotation",),
    # 2.14.1+: upstream's percolate_tags gives the custom, the patch seq_nr and autograd_backward
    "torch._inductor.pattern_matcher._AUTOGRAD_META_KEYS": ("local-inductor-replacement-annotation",),
    "torch._inductor.pattern_matcher._replacement_autograd_meta": ("local-inductor-replacement-annotation",),
    # 2.10.0+: the mark on torch's functions that run a whole trace
    "torch._compile._UNANNOTATED_WHEN_DISABLED": ("local-export-no-internal-keys",),
    "torch._compile._unannotated_when_disabled": ("local-export-no-internal-keys",),
}

# Module-level imports the series' own helpers use that the release's module (and upstream's) lacks, each with
# the patch that adds it (a reviewer asks for module-level imports, not one inside each call of a hot helper).
LOCAL_MODULE_IMPORTS = {
    "torch.fx.traceback.threading": ("local-annotation-entered-in-trace",),  # 2.5.1-2.9.1 lack it
    "torch.fx.traceback.bisect": ("local-bw-seq-nr-ranges",),
    "torch.fx.traceback._get_sequence_nr": ("local-bw-seq-nr-ranges",),
    "torch._functorch._aot_autograd.logging_utils.weakref": ("local-stacktrace-hooks-reset",),
    # 2.10.0+: where torch disables a function that runs a whole trace, it marks it (a decorator at module level)
    "torch._dynamo.eval_frame._UNANNOTATED_WHEN_DISABLED": ("local-export-no-internal-keys",),
    "torch._dynamo.eval_frame._unannotated_when_disabled": ("local-export-no-internal-keys",),
    "torch.fx.experimental.proxy_tensor._unannotated_when_disabled": ("local-export-no-internal-keys",),
    # 2.10.0+: the graph-break helper's return type, with the module's other typing names (reviewer rf3: not
    # under TYPE_CHECKING)
    "torch._dynamo.variables.ctx_manager.NoReturn": ("local-dynamo-annotation-constants",),
    # 2.15.0 (the pull request; reviewer rv15a): reconstruct_type's imports at module level, not in the function
    "torch._dynamo.variables.ctx_manager.functools": ("local-dynamo-annotate-graph-break",),
    "torch._dynamo.variables.ctx_manager.GlobalSource": ("local-dynamo-annotate-graph-break",),
}

# Module-level imports a patch leaves unused where it removes the module's last use of them: the pull request
# drops them (upstream's lint, F401, refuses an unused import), so the name is gone from the module.
DROPPED_IMPORTS = {
    "torch.fx.traceback.copy": ("local-annotate-fresh-dict",),  # 2.15.0's copy of the patch
    "torch._functorch._aot_autograd.utils.copy": ("local-fwd-bw-custom-shared-values",),  # 2.13.0 and later
}

# Module state a patch makes dead, removed with the names that re-export it (a reviewer asks for dead state to go
# rather than be kept with a comment).
DROPPED_STATE = {
    "torch._functorch._aot_autograd.logging_utils.callback_set": ("local-stacktrace-hooks-reset",),
    "torch._functorch.aot_autograd.callback_set": ("local-stacktrace-hooks-reset",),
}

DOCUMENTED.append(Documented(
    "private module names", "private helpers of the series' own code in the modules it touches "
    "(`_annotation_repr`, `_SeqNrAnnotations`, ...: each is listed with its patch in "
    "`LOCAL_PRIVATE_NAMES`) and the module-level imports they use (`bisect`, `_get_sequence_nr` and, "
    "where the release lacks it, `threading` in `fx.traceback`: `LOCAL_MODULE_IMPORTS`); the series adds no "
    "public name and no other import beyond upstream's, and drops an "
    "import only where a patch removes its last use (`copy` of `fx.traceback` on 2.15.0 and of "
    "`_functorch._aot_autograd.utils` from 2.13.0: `DROPPED_IMPORTS`, upstream's lint refuses an unused one) "
    "and state only where a patch makes it dead (`callback_set` of the stack-trace hooks, with its re-export "
    "from `torch._functorch.aot_autograd`: `DROPPED_STATE`)",
    "none (the series' own helpers)", "the patches listed with each name", NEVER,
    lambda d: ((d.what == "module name added" and (d.key in LOCAL_PRIVATE_NAMES or d.key in LOCAL_MODULE_IMPORTS))
               or (d.what == "module name removed" and (d.key in DROPPED_IMPORTS or d.key in DROPPED_STATE))),
    "(module surface)"))


# Modules a series creates: a module the release does not have, importable on the patched torch only. Nothing
# in torch imports it; a program that never imports it sees no difference.
NEW_MODULES = {"torch.fx.passes.regional_inductor"}


def _in_new_module(d) -> bool:
    return d.key.rsplit(".", 1)[0] in NEW_MODULES


DOCUMENTED.append(Documented(
    "new modules", "`torch.fx.passes.regional_inductor` (upstream's regional Inductor pass) can be imported; "
    "nothing in torch imports it, so a program that does not use it sees no difference",
    "164776, 166269", "164776-regional-inductor and the patches after it", "2.10.0",
    lambda d: d.what in ("module name added", "module name removed") and _in_new_module(d), "(module surface)"))


# The series' own new module (beyond upstream): the partitions of regional Inductor's regions without the
# partitioner's quadratic cost (issue 33). Only torch.fx.passes.regional_inductor imports it.
LOCAL_NEW_MODULES = {"torch.fx.passes.infra._linear_partitioner"}

DOCUMENTED.append(Documented(
    "linear partitioner module", "`torch.fx.passes.infra._linear_partitioner` (the partitions upstream's "
    "`CapabilityBasedPartitioner` proposes, found without its quadratic cost) can be imported; only regional "
    "Inductor imports it, so a program that does not use regional Inductor sees no difference",
    "none (local)", "local-regional-inductor-linear-partitions", NEVER,
    lambda d: d.what in ("module name added", "module name removed") and d.key.rsplit(".", 1)[0] in LOCAL_NEW_MODULES,
    "(module surface)"))


def _internal_keys_only(value) -> bool:
    """A stringified custom that holds torch._dynamo.disable's internal keys, and only them."""
    return (isinstance(value, str) and "_torchdynamo_disable" in value
            and all(part.strip().startswith("_torchdynamo_disable") for part in value.strip("{}").split(", ")))


def _no_internal_keys_of_a_trace(d) -> bool:
    """local-export-no-internal-keys: a node of a non-strict export traced inside the caller's
    preserve_node_meta() without the keys of dispatch_trace or Tracer.trace, or a node of the graph
    run_decompositions() makes of it (``.decomposed``) without the keys that the release's in-place
    annotate() update wrote into the old node's custom dict (there only because the old node had one)."""
    if not (d.what == "meta" and d.key == "custom" and d.patched is None and _internal_keys_only(d.pristine)):
        return False
    if re.search(r"_torchdynamo_disable_method'?: '?(dispatch_)?trace'?[,}]", d.pristine) is not None:
        return True
    return d.graph.endswith(".decomposed")


DOCUMENTED.append(Documented(
    "custom of a non-strict export inside preserve_node_meta()",
    "no `_torchdynamo_disable*` keys from the two functions that run a whole trace, make_fx's `dispatch_trace` "
    "and fx's `Tracer.trace` (disabled by Dynamo once it has run), which the release's disable wrapper (from "
    "2.10) stamps on every node of a non-strict export traced inside the caller's `preserve_node_meta()` "
    "(`_torchdynamo_disable_method: 'dispatch_trace'` or `'trace'`); every other disabled function's ops keep "
    "theirs. In the graph `run_decompositions()` makes of such an export, the ops of a torch function it runs "
    "disabled (2.14: the type-promotion wrapper of `torch._refs`, `'add'`, `'_ref'`) have no custom either: "
    "the release's `annotate()` writes that function's keys in place into the old node's custom dict, which "
    "the re-trace shares (it changes the old program too), so they appear only where the old node had one; "
    "outside `preserve_node_meta()` the release records none there too",
    "none (local; the keys come from upstream PR 166341)", "local-export-no-internal-keys", NEVER,
    _no_internal_keys_of_a_trace, "export_disabled_functions"))


def _names_of_module(module: str) -> Callable:
    """A row's test: a name of MODULE (a new module of the series) is added to, or missing from, the surface."""
    return lambda d: d.what in ("module name added", "module name removed") and d.key.rsplit(".", 1)[0] == module


# The series' own new module (beyond upstream, issue 34): the kernel_annotations option's comments and profiler
# scopes. Inductor's code generation imports it; with the option off (the default) it writes nothing, and the
# cache keys hold nothing more than the option's value, hashed as any Inductor option (with it on they also hash
# the graph's annotations); compile_inductor_output_code compares the output code and the profiler events of an
# unannotated step text for text.
KERNEL_ANNOTATIONS_MODULE = "torch._inductor.kernel_annotations"

DOCUMENTED.append(Documented(
    "kernel annotations module", "`torch._inductor.kernel_annotations` (the comments and profiler scopes of the "
    "option `torch._inductor.config.kernel_annotations`, off by default) can be imported, and Inductor imports it "
    "when it generates code; with the option off it writes nothing: the output code, kernel names and profiler "
    "events are the release's, and the FX graph and AOTAutograd cache keys hold nothing more than the option's "
    "value",
    "none (local)", "local-inductor-kernel-annotations", NEVER, _names_of_module(KERNEL_ANNOTATIONS_MODULE),
    "(module surface)"))


# The series' own new module (beyond upstream, issue 34): the eager ops' profiler scopes of the same option.
# aot_eager and regional Inductor import it only with the option on.
EAGER_SCOPES_MODULE = "torch._inductor.eager_annotation_scopes"

DOCUMENTED.append(Documented(
    "eager annotation scopes module", "`torch._inductor.eager_annotation_scopes` (the profiler scopes of the ops "
    "that run op by op, in `aot_eager` graphs and outside regional Inductor's compiled regions, with the option "
    "`torch._inductor.config.kernel_annotations` on) can be imported; nothing imports it while the option is off, "
    "so the graphs `aot_eager` and regional Inductor run are the release's",
    "none (local)", "local-eager-annotation-scopes", NEVER, _names_of_module(EAGER_SCOPES_MODULE),
    "(module surface)"))


# Programs of the corpus that call a torch.fx.traceback function in compiled code.
FX_TRACEBACK_CALLERS = {"compile_reads_current_meta"}

DOCUMENTED.append(Documented(
    "stack_trace, guards, counters of a compiled call into torch.fx.traceback", "Dynamo traces into "
    "`torch.fx.traceback` (upstream puts it on `trace_rules.MOD_INLINELIST` with annotate's Dynamo support): "
    "`get_current_meta()` in compiled code is inlined and guarded on what it reads, where pristine broke the graph "
    "at the call ('skip function get_current_meta'); the ops after it are in the frame's own graph, so their stack "
    "trace names the frame instead of its resume function",
    "164916", "164916-dynamo-annotate", "2.10.0",
    lambda d: d.program in FX_TRACEBACK_CALLERS and (
        d.what in ("guards", "counters") or (d.what == "meta" and d.key == "stack_trace")),
    "compile_reads_current_meta"))

@dataclass(frozen=True)
class Pending:
    item: str  # the issue item and the fix under way
    covers: Callable  # Difference -> bool


PENDING: list[Pending] = []


