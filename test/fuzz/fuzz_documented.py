"""What may differ between a patched release and upstream 2.13 on an annotated program: the data rows.

``BEYOND_UPSTREAM``: a local patch does more than upstream on purpose (README, "Where annotated programs
differ from upstream", is checked against these rows). A row explains an op difference only on a release
whose series carries its patch, and only in the shape the patch gives it.

``RELEASE_CANNOT_RUN``: a shape the release itself cannot run, patched or not (a program using it raises on
the patched side and not on upstream): the generator's programs are the same on every release, so a
release's limits are said here, by data, instead of skipping programs.

``UPSTREAM_ONLY``: upstream marks ops by a feature the series does not backport.

``RELEASE_TRACES_OTHERWISE``: the release traces the program into other nodes than 2.13 (not an annotation
matter), so an op compared can be another instance on each side.

``UPSTREAM_REFUSES``: what upstream 2.13 refuses and the patched release runs.

Every other difference is a defect of the series.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


def release_tuple(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("+")[0].split(".")[:3])


@lru_cache(maxsize=None)
def series_patches(release: str) -> frozenset:
    """Patch names of the release's series (patches/<release>/series), an empty set for a release without."""
    path = REPO / "patches" / release.split("+")[0] / "series"
    if not path.exists():
        return frozenset()
    return frozenset(Path(line.strip()).stem for line in path.read_text().splitlines()
                     if line.strip() and not line.startswith("#"))


@dataclass(frozen=True)
class BeyondUpstream:
    key: str
    patch: str  # the local patch that does it
    change: str  # what the patched release gives and upstream does not, for the README
    allows: Callable  # (OpDifference, patched record, oracle record) -> bool

    def explains(self, diff, patched: dict, oracle: dict, release: str) -> bool:
        # ``patch`` may name several ("a, b"): the one of each release's series that does it
        return (any(p.strip() in series_patches(release) for p in self.patch.split(","))
                and self.allows(diff, patched, oracle))


def _only_annotates_what_upstream_leaves_bare(diff, strip_marks: bool = False) -> bool:
    """Where upstream has a node without custom the patched release may have one; nothing else differs.
    ``strip_marks``: upstream's torch._dynamo.disable marks (UPSTREAM_ONLY) are left out first."""
    spare = [(_without_disable_marks(c), b) for c, b in diff.oracle] if strip_marks else list(diff.oracle)
    for custom, backward in diff.patched:
        if (custom, backward) in spare:
            spare.remove((custom, backward))
        elif (None, backward) in spare:
            spare.remove((None, backward))
        else:
            return False
    return True


def _customs_of_accumulations(record: dict, diff) -> list:
    """The custom of each gradient-accumulation node (is_gradient_acc) of ``diff``'s family and target."""
    return [custom for graph in record["graphs"] if graph["graph"].split("#")[0] == diff.family
            for _sub, target, custom, _backward, acc in graph["ops"] if target == diff.target and acc]


def _extends(patched: str | None, upstream: str | None) -> bool:
    """The patched custom holds every key of upstream's with its value, and more."""
    import json

    if patched is None or upstream is None:
        return False
    a, b = json.loads(patched), json.loads(upstream)
    return len(a) > len(b) and all(k in a and a[k] == v for k, v in b.items())


def _other_instance_of_graph_broken_block(diff, patched: dict, oracle: dict) -> bool:
    """Upstream abandons a frame that breaks inside annotate() to eager; the code after the break (a helper
    decorated with annotate_fn, a resumed frame) is compiled as a frame of its own while the eager annotate()
    is active, and AOTAutograd stamps that annotation on the frame's backward nodes. Where upstream's nodes
    differ from the patched ones only that way, the patched nodes may (1) carry custom where upstream has none,
    (2) extend upstream's stamped annotation by the keys of the block they ran in (a backward node no forward
    node pairs with: local-bw-seq-nr-ranges gives the in-place op's annotation), or (3) be a gradient
    accumulation without custom where upstream's accumulation has the stamped annotation."""
    spare = list(diff.oracle)
    upstream_acc = _customs_of_accumulations(oracle, diff)
    patched_acc = _customs_of_accumulations(patched, diff)
    for custom, backward in diff.patched:
        if (custom, backward) in spare:
            spare.remove((custom, backward))
            continue
        match = next((x for x in spare if x[1] == backward and (
            x[0] is None or (backward and _extends(custom, x[0]))
            or (custom is None and None in patched_acc and x[0] in upstream_acc))), None)
        if match is None:
            return False
        spare.remove(match)
        if custom is None and match[0] is not None:
            patched_acc.remove(None)
            upstream_acc.remove(match[0])
    return True


def _returns_view_of_mutated(features) -> bool:
    """The program may return a view of an intermediate it mutated: the feature that writes one, or a mutation
    through a view (inplace_view) followed by a chain of views of the result (view), the last block of a
    generated program being what it returns. In an export graph upstream's torch._dynamo.disable marks
    (UPSTREAM_ONLY) may sit on the same ops, so the row leaves them out before it compares."""
    return "output_view_of_mutated" in features or {"inplace_view", "view"} <= set(features)


def op_name(target: str) -> str:
    """"aten.view.default" for an observed target "<OpOverload(op='aten.view', overload='default')>"."""
    match = re.fullmatch(r"<OpOverload\(op='([^']+)', overload='([^']+)'\)>", target)
    return f"{match[1]}.{match[2]}" if match else target


# The view ops a regenerated output view is made of (the generator's views: reshape, slicing, select, t,
# narrow, unsqueeze/squeeze, expand).
_VIEW_OPS = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.slice.Tensor", "aten.select.int",
    "aten.permute.default", "aten.t.default", "aten.transpose.int", "aten.narrow.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.expand.default", "aten.as_strided.default", "aten.alias.default",
})


BEYOND_UPSTREAM = [
    BeyondUpstream(
        "backward nodes whose seq_nr no forward node has: annotated", "local-bw-seq-nr-ranges",
        "backward ops traced under an autograd Node whose number no forward node took (an in-place op on a "
        "view, under autograd's CopySlices; a Function applied inside another Function's forward) carry the "
        "annotation that was current when autograd handed out that number; upstream leaves them unannotated",
        lambda d, p, o: (d.family in ("aot_backward", "make_fx_joint")
                         and bool({"inplace_view", "output_view_of_mutated", "custom_function_nested"}
                                  & set(p["features"]))
                         and _only_annotates_what_upstream_leaves_bare(d))),
    BeyondUpstream(
        "views regenerated at an output: annotated", "local-view-replay-outputs",
        "a view of a mutated intermediate that a function returns, regenerated from its base at the output "
        "(outside any op), carries the view's annotation, stack trace and seq_nr, as a view regenerated inside "
        "an op does; upstream leaves it without (no custom, stack trace or seq_nr)",
        lambda d, p, o: (_returns_view_of_mutated(p["features"]) and op_name(d.target) in _VIEW_OPS
                         and _only_annotates_what_upstream_leaves_bare(d, strip_marks=True))),
    BeyondUpstream(
        "non-strict export: custom without preserve_node_meta", "local-export-nonstrict-custom",
        "non-strict torch.export gives the nodes of an annotate() block their custom; upstream 2.13 only "
        "inside a user preserve_node_meta()",
        lambda d, p, o: (p["capture"] == "export_nonstrict" and d.family in ("export", "export_decomposed")
                         and _only_annotates_what_upstream_leaves_bare(d, strip_marks=True))),
    BeyondUpstream(
        "graph break inside annotate: both sides compiled", "local-dynamo-annotate-graph-break",
        "a graph break inside an annotate() block (also in a helper frame called there) compiles the code "
        "on both sides of the break, every node annotated; upstream runs the rest of the frame eagerly, so an "
        "op it does capture is another instance (traced outside the block, or compiled as a frame of its own "
        "while the eager block is active: AOTAutograd stamps the block's annotation on its backward nodes, "
        "gradient-accumulation adds included, without the keys of an inner block)",
        lambda d, p, o: (p["capture"] == "compile"
                         and bool({"graph_break_in_annotate", "graph_break_in_annotate_nested_frame"}
                                  & set(p["features"]))
                         and _other_instance_of_graph_broken_block(d, p, o))),
    BeyondUpstream(
        "post-grad nodes of a pattern replacement: annotated", "local-inductor-replacement-annotation",
        "the nodes Inductor's pattern matcher inserts for a match (the softmax rewrite's amax, sub, mul) take "
        "custom, seq_nr and autograd_backward from the match's output node, only where a matched node is "
        "annotated; upstream gives them no custom before 2.14, and from 2.14 the replaced output's custom but "
        "no seq_nr or autograd_backward. The fuzzer compares AOT graphs, which Inductor has "
        "not rewritten yet, so this row explains nothing here: test/inductor/test_replacement_annotations.py "
        "checks it",
        lambda d, p, o: False),
    BeyondUpstream(
        "kernels and profiler events: the region named (kernel_annotations)", "local-inductor-kernel-annotations",
        "with torch._inductor.config.kernel_annotations on (TORCHINDUCTOR_KERNEL_ANNOTATIONS=1), each kernel call "
        "and extern call of Inductor's output code from annotated nodes has an '# Annotation: {...}' comment and runs "
        "in a torch.profiler.record_function(\"annotation key=value, ...[ (backward)]\", KERNEL) scope; upstream "
        "names no region there (through 2.15). The fuzzer compares graphs, not output code, so this row explains nothing "
        "here: test/inductor/test_kernel_annotations.py checks it",
        lambda d, p, o: False),
]


@dataclass(frozen=True)
class UpstreamOnly:
    """Upstream puts something in ``custom`` by a feature the series does not backport."""
    key: str
    change: str
    allows: Callable  # (OpDifference, patched record, oracle record) -> bool

    def explains(self, diff, patched: dict, oracle: dict, release: str) -> bool:
        return self.allows(diff, patched, oracle)


_DISABLE_KEYS = ("_torchdynamo_disable", "_torchdynamo_disable_recursive", "_torchdynamo_disable_method")


def _without_disable_marks(custom: str | None) -> str | None:
    import json

    if custom is None:
        return None
    value = {k: v for k, v in json.loads(custom).items() if k not in _DISABLE_KEYS}
    return json.dumps(value, sort_keys=True) if value else None


UPSTREAM_ONLY = [
    UpstreamOnly(
        "torch._dynamo.disable marks ops traced during export",
        "upstream's torch._dynamo.disable wraps the call in annotate({'_torchdynamo_disable': True, ...}) while "
        "exporting (torch/_dynamo/eval_frame.py), so ops run_decompositions traces inside a disabled helper carry "
        "those three keys; the release has no such marking and the series does not add it",
        lambda d, p, o: _matches_without_disable_marks(d)),
]


def _matches_without_disable_marks(d) -> bool:
    """Upstream's custom is the patched one plus the marks, or, where upstream's marking replaced the op's
    own annotation (run_decompositions re-traces an op inside the disabled wrapper under the marks alone),
    the marks only."""
    spare, left = sorted(d.oracle, key=repr), []
    for custom, backward in sorted(d.patched, key=repr):  # first the nodes whose custom is upstream's unmarked
        match = next((x for x in spare if x[1] == backward and (x[0] == custom or (
            custom is not None and _without_disable_marks(x[0]) == custom))), None)
        if match is None:
            left.append(backward)
        else:
            spare.remove(match)
    for backward in left:  # then the rest against upstream's nodes that hold the marks only
        match = next((x for x in spare if x[1] == backward and x[0] is not None
                      and _without_disable_marks(x[0]) is None), None)
        if match is None:
            return False
        spare.remove(match)
    return not spare


@dataclass(frozen=True)
class ReleaseNumbers:
    """The release numbers autograd Nodes otherwise than upstream, and the series keeps the release's numbers
    ("nothing else changes"): a difference in seq_nr, which the comparison here does not look at (it compares
    custom and autograd_backward), documented in README for consumers that pair nodes by seq_nr."""
    key: str
    change: str  # what the patched release gives, what upstream gives, and how a consumer pairs instead


RELEASE_NUMBERS_OTHERWISE = [
    ReleaseNumbers(
        "backward of an indexed assignment into a fresh tensor: the release's seq_nr (2.5.1)",
        "out[idx, :] = x on 2.5.1 traces index_put on a view, which autograd wraps in a CopySlices made after "
        "the forward op: the backward (index under CopySlices) keeps 2.5.1's own seq_nr, one past the forward "
        "index_put's, while 2.13 and 2.15 trace index_put on out itself (no CopySlices) and pair the two. custom "
        "is right either way (local-bw-seq-nr-ranges), but a consumer that pairs backward with forward ops by "
        "equal seq_nr, as torchtitan's graph trainer does, finds no forward op for it on 2.5.1; pair such a "
        "backward node with the forward node of the greatest seq_nr not above its own (the op autograd "
        "numbered last before it, as local-bw-seq-nr-ranges does), or by its custom and fwd_source_fn_stack"),
]


@dataclass(frozen=True)
class ReleaseTraces:
    """The release traces the program into other nodes than 2.13 (not an annotation matter): an op both sides
    emit equally often can then be another instance on each side."""
    key: str
    reason: str
    allows: Callable  # (OpDifference, patched record, oracle record, release) -> bool

    def explains(self, diff, patched: dict, oracle: dict, release: str) -> bool:
        return self.allows(diff, patched, oracle, release)


def _only_backward_flag_added(d) -> bool:
    """Same customs; only some of the patched nodes are autograd_backward where upstream's are not."""
    same = sorted(repr(c) for c, _ in d.patched) == sorted(repr(c) for c, _ in d.oracle)
    return same and sum(b for _, b in d.patched) > sum(b for _, b in d.oracle)


_FUNCTION_APPLY = "AutogradFunctionApply"  # how a recorded Dynamo op names autograd_function_apply


def _nests_function_apply(record: dict) -> bool:
    """Dynamo's graph holds an autograd_function_apply inside another's forward body (its own HOP)."""
    return any(_FUNCTION_APPLY in target and sub.split(".")[-1].startswith("fwd_body")
               for graph in record["graphs"] if graph["graph"].startswith("dynamo#")
               for sub, target, *_ in graph["ops"])


RELEASE_TRACES_OTHERWISE = [
    ReleaseTraces(
        "a backward op the release's partitioner moves into the forward graph",
        "before 2.13 the partitioner can move a backward op (a weight's transpose for the backward's mm) into "
        "the forward graph, where it carries autograd_backward as the no-annotation differential's row "
        "'autograd_backward' (180251) documents; 2.13 keeps it in the backward graph, so the forward graphs "
        "hold the same number of that op with other flags",
        lambda d, p, o, release: (release_tuple(release) < (2, 13, 0) and d.family == "aot_forward"
                                  and _only_backward_flag_added(d))),
    ReleaseTraces(
        "an autograd.Function applied in another's forward: Dynamo nests its own HOP",
        "2.5.1's Dynamo captures an autograd.Function applied inside another Function's forward as an "
        "autograd_function_apply of its own in the outer forward body, whose backward body holds the "
        "_set_grad_enabled pair, and the outer forward body has none; 2.13 traces the outer forward under "
        "no_grad, inlines the inner Function, puts a _set_grad_enabled pair in each forward body and reads each "
        "HOP's output with a getitem: the _set_grad_enabled and getitem nodes compared are other instances",
        # measured with fuzz seed 67: 2.5.1 nests the HOP; 2.6.0, 2.8.0, 2.9.1 and 2.10.0 inline the inner Function
        lambda d, p, o, release: (release_tuple(release) < (2, 6, 0) and d.family == "dynamo"
                                  and d.target in ("torch._C._set_grad_enabled", "_operator.getitem")
                                  and _nests_function_apply(p) and not _nests_function_apply(o))),
]


@dataclass(frozen=True)
class Crash:
    key: str
    reason: str
    applies: Callable  # (record, release) -> bool: the program and the error text it raised

    def explains(self, record: dict, release: str) -> bool:
        return self.applies(record, release)


RELEASE_CANNOT_RUN = [
    Crash(
        "Dynamo cannot resume after a graph break inside nested with blocks (2.5.1)",
        "2.5.1's Dynamo raises InternalTorchDynamoError KeyError in resume_execution "
        "(block_target_offset_remap) for a graph break inside two nested with blocks of a frame that already "
        "resumed once; pristine 2.5.1 does the same with torch.enable_grad() blocks, no annotation involved. "
        "Checked on 2.5.1 only: on another release such a crash is not explained by this row",
        lambda r, release: (release.split("+")[0] == "2.5.1" and r["capture"] == "compile"
                            and r["error"].startswith("InternalTorchDynamoError: KeyError")
                            and "block_target_offset_remap" in (r["traceback"] or ""))),
    Crash(
        "non-strict export of a ModuleList slice (2.5.1)",
        "2.5.1's non-strict torch.export raises TypeError in _ModuleStackTracer's AttrProxy when the model "
        "slices an nn.ModuleList (transformers' LLaMA: self.layers[:num_hidden_layers]); pristine 2.5.1 does the "
        "same with nothing annotated (measured on the model program hf_llama_sdpa/export_nonstrict). Checked on "
        "2.5.1 only",
        lambda r, release: (release.split("+")[0] == "2.5.1" and r["capture"] == "export_nonstrict"
                            and r["error"].startswith("TypeError: _ModuleStackTracer")
                            and "AttrProxy.__init__() missing 1 required positional argument" in r["error"])),
]
UPSTREAM_REFUSES = [
    Crash(
        "strict export of torch.utils.checkpoint (2.13)",
        "upstream 2.13's strict torch.export raises RuntimeError _checkpoint_context_fn on any non-reentrant "
        "torch.utils.checkpoint call (tag_activation_checkpoint), annotated or not",
        lambda r, release: (r["capture"] == "export_strict" and "checkpoint" in r["features"]
                            and r["error"].startswith("RuntimeError: _checkpoint_context_fn"))),
]
