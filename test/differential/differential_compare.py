"""Compare what the corpus did under the pristine and the patched torch of one release.

Every difference becomes one ``Difference`` (program, what, graph, node, meta key, the two values), and
each is classified against documented_differences.py: a documented row (a backported upstream PR does it),
a pending entry (a known regression another fix is under way for), or ``unexplained`` (a regression).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from documented_differences import DOCUMENTED, PENDING, release_tuple

UNEXPLAINED = "unexplained"


@dataclass
class Difference:
    program: str
    what: str  # result, graph list, node names, code, readable, node, meta, guards, recompiles, counters, ...
    graph: str = ""  # graph kind (dynamo, aot_forward, aot_backward, make_fx, export_*)
    node: str = ""  # the pristine node's name
    key: str = ""  # meta key, result name, module name
    pristine: object = None
    patched: object = None
    patched_meta: dict = field(default_factory=dict)  # the patched node's meta, for the rows' conditions
    pristine_meta: dict = field(default_factory=dict)  # the pristine node's meta
    cause: str = UNEXPLAINED

    def line(self) -> str:
        where = "/".join(x for x in (self.program, self.graph, self.node, self.key) if x)
        return f"[{self.cause}] {self.what} {where}: pristine {_short(self.pristine)} | patched {_short(self.patched)}"


def _short(value, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _rename(text: str, mapping: dict[str, str]) -> str:
    if not mapping:
        return text
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def _canonical(text: str, names: list[str]) -> str:
    return _rename(text, {n: f"__n{i}" for i, n in enumerate(names)})


def _without_comments(readable: str) -> str:
    """print_readable's code without its comment and blank lines: the comments render node meta (stack traces,
    annotations) that is compared node by node, key by key, where a difference gets its own cause."""
    return "\n".join(line for line in readable.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def compare_graph(program: str, pristine: dict, patched: dict) -> list[Difference]:
    kind = pristine["kind"]
    out = []
    p_nodes, q_nodes = pristine["nodes"], patched["nodes"]
    p_names, q_names = [n["name"] for n in p_nodes], [n["name"] for n in q_nodes]
    same_count = len(p_nodes) == len(q_nodes)
    # Patched name -> pristine name, when the graphs differ in node names only: values that mention a node
    # (%name) are then compared through it, so one renamed node is one difference, not one per mention.
    rename = {}
    if pristine["code"] != patched["code"]:
        if same_count and _canonical(pristine["code"], p_names) == _canonical(patched["code"], q_names):
            renamed = [(p, q) for p, q in zip(p_names, q_names) if p != q]
            out.append(Difference(program, "node names", kind, key=f"{len(renamed)} nodes",
                                  pristine=[p for p, _ in renamed][:8], patched=[q for _, q in renamed][:8]))
            rename = {q: p for p, q in zip(p_names, q_names)}
        else:
            out.append(Difference(program, "code", kind, pristine=pristine["code"], patched=patched["code"]))
    elif _without_comments(pristine["readable"]) != _without_comments(patched["readable"]):
        out.append(Difference(program, "readable", kind, pristine=pristine["readable"], patched=patched["readable"]))
    if not same_count:
        out.append(Difference(program, "node count", kind, pristine=len(p_nodes), patched=len(q_nodes)))
        return out
    for p, q in zip(p_nodes, q_nodes):
        q_target = rename.get(q["target"], q["target"]) if q["op"] == "placeholder" else q["target"]  # its name
        if (p["op"], p["target"], p["graph"]) != (q["op"], q_target, q["graph"]):
            out.append(Difference(program, "node", kind, p["name"], pristine=(p["op"], p["target"]),
                                  patched=(q["op"], q["target"])))
            continue
        q_meta = {k: _rename(v, {f"%{a}": f"%{b}" for a, b in rename.items()}) if rename else v
                  for k, v in q["meta"].items()}
        for key in sorted(set(p["meta"]) | set(q_meta)):
            a, b = p["meta"].get(key), q_meta.get(key)
            if a != b:
                out.append(Difference(program, "meta", kind, p["name"], key, a, b, q["meta"], p["meta"]))
    return out


def compare_program(name: str, pristine: dict, patched: dict) -> list[Difference]:
    out = []
    for key in sorted(set(pristine["results"]) | set(patched["results"])):
        a, b = pristine["results"].get(key), patched["results"].get(key)
        if a != b:
            out.append(Difference(name, "result", key=key, pristine=a, patched=b))
    p_kinds = [g["kind"] for g in pristine["graphs"]]
    q_kinds = [g["kind"] for g in patched["graphs"]]
    if p_kinds != q_kinds:
        out.append(Difference(name, "graph list", pristine=p_kinds, patched=q_kinds))
    else:
        for p, q in zip(pristine["graphs"], patched["graphs"]):
            out += compare_graph(name, p, q)
    for what in ("guards", "recompiles", "counters", "warnings", "error"):
        if pristine[what] != patched[what]:
            out.append(Difference(name, what, pristine=pristine[what], patched=patched[what]))
    return out


def compare_modules(pristine: dict, patched: dict) -> list[Difference]:
    out = []
    for module in sorted(set(pristine) | set(patched)):
        a, b = set(pristine.get(module, [])), set(patched.get(module, []))
        for name in sorted(b - a):
            out.append(Difference("(module surface)", "module name added", key=f"{module}.{name}", patched=name))
        for name in sorted(a - b):
            out.append(Difference("(module surface)", "module name removed", key=f"{module}.{name}", pristine=name))
    return out


def classify(diffs: list[Difference], release: str) -> list[Difference]:
    """Set each difference's cause: the first documented row or pending entry whose condition holds."""
    rel = release_tuple(release)
    for d in diffs:
        for row in DOCUMENTED:
            if rel < release_tuple(row.first_upstream) and row.allows(d):
                d.cause = f"documented: {row.key}"
                break
        else:
            for entry in PENDING:
                if entry.covers(d):
                    d.cause = f"pending: {entry.item}"
                    break
    return diffs


def compare(pristine: dict, patched: dict, release: str) -> list[Difference]:
    diffs = []
    for name in pristine["programs"]:
        diffs += compare_program(name, pristine["programs"][name], patched["programs"][name])
    diffs += compare_modules(pristine["modules"], patched["modules"])
    return classify(diffs, release)


def figures(pristine: dict) -> dict[str, int]:
    """How much was compared: programs, graphs, nodes, node meta entries, results."""
    progs = pristine["programs"].values()
    graphs = [g for p in progs for g in p["graphs"]]
    nodes = [n for g in graphs for n in g["nodes"]]
    return {"programs": len(pristine["programs"]), "programs with an error (both sides)": sum(bool(p["error"]) for p in progs),
            "graphs": len(graphs), "nodes": len(nodes), "node meta entries": sum(len(n["meta"]) for n in nodes),
            "results": sum(len(p["results"]) for p in progs), "guard log records": sum(len(p["guards"]) for p in progs),
            "module names": sum(len(v) for v in pristine["modules"].values())}


def tally(diffs: list[Difference]) -> Counter:
    """(cause, what, meta key or '', program) -> count."""
    return Counter((d.cause, d.what, d.key if d.what == "meta" else "", d.program) for d in diffs)
