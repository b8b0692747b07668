"""Compare what one generated program did under the patched torch and under upstream 2.13, and classify it.

Graph lists differ between releases for reasons that are not annotation tracing (2.5.1's Dynamo breaks
the graph where 2.13 does not, splitting one forward into several), so the comparison pools the graphs
of one family (Dynamo, AOT forward and inference, AOT backward, the make_fx joint, export, export after
run_decompositions) and compares, as the oracle tests do, per op target: where both sides emit a target
equally often, the multisets of (custom, autograd_backward) of its nodes must be equal. seq_nr values
differ between releases and are not compared; the annotation each node ends up with is.

Every program gets one class (``CLASSES``); a crash or a differing op is a defect unless a data row
explains it: fuzz_documented.BEYOND_UPSTREAM (the series does more than upstream, on purpose), UPSTREAM_ONLY
(upstream marks ops by a feature the series does not backport),
RELEASE_CANNOT_RUN (the release itself cannot run the shape, patched or not) or UPSTREAM_REFUSES
(2.13 refuses what the patched release runs).
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_documented import (BEYOND_UPSTREAM, RELEASE_CANNOT_RUN, RELEASE_TRACES_OTHERWISE, op_name,  # noqa: E402
                             UPSTREAM_ONLY, UPSTREAM_REFUSES)

IGNORED_TARGETS = {"aten.detach.default"}  # count and placement differ between releases (the oracle tests' rule)

EQUAL = "equal"
BOTH_CRASH = "crash on both sides"
PATCHED_CRASH = "crash on the patched side only"
ORACLE_CRASH = "crash on the oracle side only"
CANNOT_RUN = "the release cannot run the shape (documented)"
UPSTREAM_REFUSED = "upstream refuses it (documented)"
DOCUMENTED = "differs only as documented rows say"
DIFFERING_CUSTOM = "differing custom"
DIFFERING_BACKWARD = "differing autograd_backward"
# Classes that are not a defect of the series; every other class fails the CI test.
EXPLAINED = (EQUAL, BOTH_CRASH, CANNOT_RUN, UPSTREAM_REFUSED, DOCUMENTED)
CLASSES = EXPLAINED + (PATCHED_CRASH, ORACLE_CRASH, DIFFERING_CUSTOM, DIFFERING_BACKWARD)


def family(graph: str) -> str:
    """The graph family of a recorded graph name ``kind#index``."""
    kind = graph.split("#")[0]
    return "aot_forward" if kind == "aot_inference" else kind


@dataclass
class OpDifference:
    family: str
    target: str
    patched: list  # sorted (custom, autograd_backward) of the target's nodes
    oracle: list
    cause: str = ""  # DIFFERING_* or "documented: <row key>"

    def line(self) -> str:
        return f"{self.family} {self.target}: patched {self.patched} | upstream {self.oracle}"


@dataclass
class Verdict:
    seed: int
    capture: str
    features: list
    cls: str
    differences: list = field(default_factory=list)
    compared_ops: int = 0
    total_ops: int = 0
    patched_error: str | None = None
    oracle_error: str | None = None
    row: str = ""  # the data row that explains it, if any

    @property
    def explained(self) -> bool:
        return self.cls in EXPLAINED


def _ops_by_target(record: dict) -> dict:
    out = defaultdict(list)
    for graph in record["graphs"]:
        for sub, target, custom, backward, acc in graph["ops"]:
            if op_name(target) not in IGNORED_TARGETS:
                out[(family(graph["graph"]), target)].append((custom, backward))
    return out


def compare_ops(patched: dict, oracle: dict) -> tuple[list[OpDifference], int, int]:
    """(differences, ops compared, ops in all) over the targets both sides emit equally often."""
    p, o = _ops_by_target(patched), _ops_by_target(oracle)
    diffs, compared = [], 0
    for key in sorted(set(p) & set(o)):
        if len(p[key]) != len(o[key]):
            continue
        compared += len(p[key])
        a, b = sorted(p[key], key=repr), sorted(o[key], key=repr)
        if a != b:
            same_customs = sorted(map(repr, (c for c, _ in a))) == sorted(map(repr, (c for c, _ in b)))
            diffs.append(OpDifference(*key, a, b, DIFFERING_BACKWARD if same_customs else DIFFERING_CUSTOM))
    total = sum(len(v) for v in p.values()) + sum(len(v) for v in o.values())
    return diffs, 2 * compared, total


def classify(patched: dict, oracle: dict, release: str) -> Verdict:
    if patched.get("source_sha") != oracle.get("source_sha") and patched["graphs"] and oracle["graphs"]:
        raise AssertionError(f"seed {patched['seed']}: the two sides generated different programs")
    v = Verdict(patched["seed"], patched["capture"], patched["features"], EQUAL,
                patched_error=patched["error"], oracle_error=oracle["error"])
    if patched["error"] and oracle["error"]:
        v.cls = BOTH_CRASH
        return v
    if patched["error"]:
        row = next((r for r in RELEASE_CANNOT_RUN if r.explains(patched, release)), None)
        v.cls, v.row = (CANNOT_RUN, row.key) if row else (PATCHED_CRASH, "")
        return v
    if oracle["error"]:
        row = next((r for r in UPSTREAM_REFUSES if r.explains(oracle, release)), None)
        v.cls, v.row = (UPSTREAM_REFUSED, row.key) if row else (ORACLE_CRASH, "")
        return v
    v.differences, v.compared_ops, v.total_ops = compare_ops(patched, oracle)
    for d in v.differences:
        row = next((r for r in BEYOND_UPSTREAM + UPSTREAM_ONLY + RELEASE_TRACES_OTHERWISE
                    if r.explains(d, patched, oracle, release)), None)
        if row:
            d.cause = f"documented: {row.key}"
    open_diffs = [d for d in v.differences if not d.cause.startswith("documented")]
    if open_diffs:
        v.cls = DIFFERING_CUSTOM if any(d.cause == DIFFERING_CUSTOM for d in open_diffs) else DIFFERING_BACKWARD
    elif v.differences:
        v.cls = DOCUMENTED
        v.row = ", ".join(sorted({d.cause.removeprefix("documented: ") for d in v.differences}))
    return v


def compare_runs(patched: dict, oracle: dict, release: str) -> list[Verdict]:
    return [classify(patched["programs"][s], oracle["programs"][s], release)
            for s in sorted(patched["programs"], key=_program_order) if s in oracle["programs"]]


def _program_order(key: str):
    """Seeds in numeric order, then model programs (fuzz_models.py) by name."""
    return (0, int(key), "") if key.lstrip("-").isdigit() else (1, 0, key)


def tally(verdicts: list[Verdict]) -> Counter:
    return Counter(v.cls for v in verdicts)
