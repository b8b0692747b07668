"""What the report says about the captured graphs: regions, forward/backward links, coverage.

A region is one distinct annotation (``node.meta["custom"]``). A backward op belongs
to the region of its own annotation or, when it has none, to that of the forward op
it was traced from (same ``seq_nr``, searched across the forward graph's subgraphs,
as upstream's forward-to-backward copy does): so a backward op that lost its forward
op's annotation counts against that region. Gradient-accumulation ops (autograd's
sum of the gradients of a tensor used twice) have no forward op of their own and are
left unannotated upstream too; they are counted apart, never as unannotated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .capture import CapturedGraph, CapturedOp

NO_REGION = "(no annotation)"
FORWARD_KINDS = ("forward", "inference")

# Annotation keys that make upstream torch do something with a region (README, "when to use regional Inductor"):
# torch.fx.passes.regional_inductor compiles the ops marked with the first by Inductor; the min-cut partitioner
# of 2.13 reads the second (fx.traceback.MEMORY_BUDGET_ANNOTATION_KEY, set by
# torch.autograd.graph.region_activation_memory_budget) as the region's activation memory budget.
COMPILE_WITH_INDUCTOR = "compile_with_inductor"
MEMORY_BUDGET = "_region_activation_memory_budget"


def region_of(custom: Optional[dict]) -> str:
    return repr(custom) if custom else NO_REGION


def consumers(custom: Optional[dict]) -> list:
    """What reads this annotation in upstream torch, in words: regional Inductor (with its inductor_configs)
    and the per-region activation memory budget; [] for an annotation only a user reads."""
    if not isinstance(custom, dict):
        return []
    found = []
    if COMPILE_WITH_INDUCTOR in custom:
        value = custom[COMPILE_WITH_INDUCTOR]
        configs = value.get("inductor_configs") if isinstance(value, dict) else None
        found.append("regional Inductor" + (f" with {configs!r}" if configs else ""))
    if MEMORY_BUDGET in custom:
        found.append(f"activation memory budget {custom[MEMORY_BUDGET]!r}")
    return found


@dataclass
class BackwardOp:
    graph: CapturedGraph
    op: CapturedOp
    forward: Optional[tuple]  # (forward CapturedGraph, CapturedOp) it was traced from, if known

    @property
    def region(self) -> str:
        if self.op.custom:
            return region_of(self.op.custom)
        return region_of(self.forward[1].custom) if self.forward else NO_REGION

    @property
    def unannotated(self) -> bool:
        return not self.op.custom and not self.op.gradient_accumulation


@dataclass
class Region:
    name: str
    forward: list = field(default_factory=list)   # [(CapturedGraph, CapturedOp)]
    backward: list = field(default_factory=list)  # [BackwardOp]

    @property
    def consumers(self) -> list:
        """What reads the region's annotation (:func:`consumers`); every op of a region has that annotation
        (a backward op without one, that of its forward op)."""
        for _, op in self.forward:
            return consumers(op.custom)
        for b in self.backward:
            return consumers(b.op.custom or (b.forward[1].custom if b.forward else None))
        return []

    @property
    def backward_annotated(self) -> int:
        return sum(1 for b in self.backward if b.op.custom)

    @property
    def gradient_accumulation(self) -> int:
        return sum(1 for b in self.backward if b.op.gradient_accumulation)

    @property
    def backward_annotated_percent(self) -> Optional[float]:
        """Annotated share of the backward ops that can carry an annotation (all but
        gradient accumulation); None when there are none."""
        counted = len(self.backward) - self.gradient_accumulation
        return None if counted == 0 else 100.0 * self.backward_annotated / counted


@dataclass
class Report:
    graphs: list
    regions: list  # [Region], annotated regions first, in order of appearance
    backward: list  # [BackwardOp]

    @property
    def unannotated_backward(self) -> list:
        return [b for b in self.backward if b.unannotated]

    def count(self, kind: str) -> int:
        return sum(1 for g in self.graphs if g.kind == kind)


def _forward_by_seq_nr(graphs: list) -> dict:
    """{compile index: {seq_nr: [(graph, forward op with it), ...]}}."""
    index: dict = {}
    for g in graphs:
        if g.kind in FORWARD_KINDS:
            by_seq = index.setdefault(g.compile_index, {})
            for op in g.ops:
                if op.seq_nr is not None:
                    by_seq.setdefault(op.seq_nr, []).append((g, op))
    return index


def _forward_op(op: CapturedOp, candidates: list, flagged: bool):
    """The forward op ``op`` was traced from, among the forward ops with its seq_nr.

    A gradient op (``autograd_backward``; any op where the torch does not set that flag)
    takes the first of them. Any other op of the backward graph is a forward op evaluated
    again (recomputed by the partitioner or by activation checkpointing, flex_attention's
    mask_graph): it is linked only to a forward op of the same target, since a recomputation
    may get a fresh seq_nr that equals an unrelated forward op's. Gradient accumulation has
    no forward op."""
    if not candidates or op.gradient_accumulation:
        return None
    if op.autograd_backward or not flagged:
        return candidates[0]
    return next((c for c in candidates if c[1].target == op.target), None)


def build_report(graphs: list) -> Report:
    forward_index = _forward_by_seq_nr(graphs)
    regions: dict = {}

    def region(name: str) -> Region:
        return regions.setdefault(name, Region(name))

    backward = []
    for g in graphs:
        if g.kind in FORWARD_KINDS:
            for op in g.ops:
                region(region_of(op.custom)).forward.append((g, op))
        elif g.kind == "backward":
            seq_index = forward_index.get(g.compile_index, {})
            flagged = any(op.autograd_backward for op in g.ops)
            for op in g.ops:
                b = BackwardOp(g, op, _forward_op(op, seq_index.get(op.seq_nr, []), flagged))
                backward.append(b)
                region(b.region).backward.append(b)
    ordered = [r for name, r in regions.items() if name != NO_REGION]
    if NO_REGION in regions:
        ordered.append(regions[NO_REGION])
    return Report(graphs, ordered, backward)
