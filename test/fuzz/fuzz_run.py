"""Run generated annotated programs under the patched torch and under upstream 2.13, compare, report.

Each side is its own interpreter (fuzz_observe.py): the patched torch in .venv (the differential's
PATCHED_PYTHON) and the oracle (oracle_interpreter.ORACLE_PYTHON, .venv-oracle with torch 2.13.0). The
two sides of a batch of seeds run at the same time; a batch whose interpreter dies or overruns its time
records that as the error of the seeds it did not finish. bench/fuzz_annotations.py is the campaign
command; test_fuzz_annotations.py runs a fixed seed range in CI.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "differential")]

from differential_sides import PATCHED_PYTHON, REPO, TORCH_RELEASE  # noqa: E402
from fuzz_compare import CLASSES, EXPLAINED, Verdict, compare_runs, tally  # noqa: E402
from fuzz_documented import (BEYOND_UPSTREAM, RELEASE_CANNOT_RUN, RELEASE_TRACES_OTHERWISE,  # noqa: E402
                             UPSTREAM_ONLY, UPSTREAM_REFUSES)
from fuzz_models import program  # noqa: E402
from oracle_interpreter import ORACLE_PYTHON  # noqa: E402

WORK = REPO / "build" / "fuzz"


def _start(python: Path, seeds: list, out: Path) -> subprocess.Popen:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    log = open(out.with_suffix(".log"), "w")
    return subprocess.Popen([str(python), str(HERE / "fuzz_observe.py"), str(out), str(out.parent / "programs"),
                             *map(str, seeds)], stdout=log, stderr=subprocess.STDOUT, cwd=str(HERE))


def _finish(proc: subprocess.Popen, seeds: list, out: Path, deadline: float) -> dict:
    """The side's observations; a seed it did not finish gets the reason as its error."""
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        ended = f"exit status {proc.returncode}"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        ended = "killed: the batch overran its time"
    result = json.loads(out.read_text()) if out.exists() else {"torch": "?", "programs": {}}
    for seed in seeds:
        if str(seed) not in result["programs"]:
            p = program(seed)
            result["programs"][str(seed)] = {
                "seed": seed, "capture": p.capture, "features": sorted(p.features), "graphs": [],
                "error": f"ObserverDied: the interpreter ended before this seed finished ({ended})",
                "traceback": out.with_suffix(".log").read_text()[-3000:]}
    return result


def run_sides(seeds: list, batch: int = 25, batch_timeout: float = 900, work: Path = WORK / "campaign",
              oracle_python: Path = ORACLE_PYTHON) -> tuple[dict, dict]:
    """(patched observations, oracle observations) of ``seeds`` (seeds, or model programs' names), run
    ``batch`` per interpreter. ``oracle_python`` is upstream: the 2.13 oracle, or a pristine release
    that has annotation tracing itself."""
    patched, oracle = {"programs": {}}, {"programs": {}}
    for start in range(0, len(seeds), batch):
        part = seeds[start:start + batch]
        name = str(part[0]).replace("/", "-")
        outs = (work / "patched" / f"{name}.json", work / "oracle" / f"{name}.json")
        # The 2.13 oracle's observations of these seeds, kept by an earlier release's run (oracle_cache.py)
        kept = _kept_oracle_run(part) if oracle_python == ORACLE_PYTHON else None
        if kept is not None:
            outs[1].parent.mkdir(parents=True, exist_ok=True)
            outs[1].write_text(kept)
        procs = [_start(py, part, out) if py else None
                 for py, out in zip((PATCHED_PYTHON, None if kept is not None else oracle_python), outs)]
        deadline = time.monotonic() + batch_timeout
        for proc, out, merged in zip(procs, outs, (patched, oracle)):
            result = _finish(proc, part, out, deadline) if proc else json.loads(out.read_text())
            merged["torch"] = result["torch"]
            merged["programs"].update(result["programs"])
            if proc and out == outs[1] and oracle_python == ORACLE_PYTHON and proc.returncode == 0:
                _keep_oracle_run(part, out.read_text())
    return patched, oracle


def _oracle_args(seeds: list) -> list[str]:
    return ["fuzz_observe.py", *map(str, seeds)]


def _kept_oracle_run(seeds: list) -> str | None:
    from oracle_cache import cached_text

    return cached_text(ORACLE_PYTHON, _oracle_args(seeds))


def _keep_oracle_run(seeds: list, text: str) -> None:
    from oracle_cache import keep_text

    keep_text(ORACLE_PYTHON, _oracle_args(seeds), text)


def load_sides(seeds: list[int], work: Path = WORK / "campaign") -> tuple[dict, dict]:
    """The observations an earlier run left in ``work``, for the seeds both sides finished."""
    sides = []
    for side in ("patched", "oracle"):
        merged = {"programs": {}}
        for path in sorted((work / side).glob("*.json")):
            result = json.loads(path.read_text())
            merged["torch"] = result["torch"]
            merged["programs"].update(result["programs"])
        sides.append(merged)
    done = {str(s) for s in seeds} & set(sides[0]["programs"]) & set(sides[1]["programs"])
    for side in sides:
        side["programs"] = {k: v for k, v in side["programs"].items() if k in done}
    return sides[0], sides[1]


def run(seeds: list, release: str = TORCH_RELEASE, **kw) -> tuple[list[Verdict], dict, dict, float]:
    start = time.monotonic()
    patched, oracle = run_sides(seeds, **kw)
    return compare_runs(patched, oracle, release), patched, oracle, time.monotonic() - start


def _explains(row_key: str, v: Verdict) -> bool:
    return row_key in v.row.split(", ") or any(d.cause == f"documented: {row_key}" for d in v.differences)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report(verdicts: list[Verdict], patched: dict, oracle: dict, seconds: float, command: str,
           release: str = TORCH_RELEASE) -> str:
    counts = tally(verdicts)
    compared = sum(v.compared_ops for v in verdicts)
    total = sum(v.total_ops for v in verdicts)
    when = (f"{seconds:.0f} s wall" if seconds else "classified again from the observations of an earlier run")
    lines = [f"# Annotated-program fuzzing against upstream, torch {release}", "",
             f"Patched {patched.get('torch')} vs upstream {oracle.get('torch')}: {len(verdicts)} programs "
             f"(seeds {verdicts[0].seed if verdicts else '-'}..{verdicts[-1].seed if verdicts else '-'}), "
             f"{when}. Command: `{command}`.", "",
             f"Ops compared (targets both sides emit equally often, both sides counted): {compared} of {total}.",
             "", "| class | programs | a defect? |", "|---|---|---|"]
    lines += [f"| {c} | {counts.get(c, 0)} | {'no' if c in EXPLAINED else 'yes'} |" for c in CLASSES]
    by_capture = {}
    for v in verdicts:
        by_capture.setdefault(v.capture, []).append(v)
    lines += ["", "| capture path | programs | equal | explained | unexplained |", "|---|---|---|---|---|"]
    for capture, vs in sorted(by_capture.items()):
        lines.append(f"| {capture} | {len(vs)} | {sum(v.cls == 'equal' for v in vs)} | "
                     f"{sum(v.explained for v in vs)} | {sum(not v.explained for v in vs)} |")
    rows = [r.key for r in BEYOND_UPSTREAM + UPSTREAM_ONLY + RELEASE_TRACES_OTHERWISE + RELEASE_CANNOT_RUN + UPSTREAM_REFUSES]
    lines += ["", "## Documented rows", "", "| row | programs with a difference or crash it explains |", "|---|---|"]
    lines += [f"| {_cell(r)} | {sum(_explains(r, v) for v in verdicts)} |" for r in rows]
    unexplained = [v for v in verdicts if not v.explained]
    lines += ["", f"## Unexplained disagreements ({len(unexplained)})", ""]
    for v in unexplained:
        lines.append(f"- seed {v.seed} ({v.capture}; {', '.join(v.features)}): **{v.cls}**")
        if v.patched_error:
            lines.append(f"  - patched raised: `{_cell(v.patched_error)}`")
        if v.oracle_error:
            lines.append(f"  - upstream raised: `{_cell(v.oracle_error)}`")
        for d in v.differences:
            if not d.cause.startswith("documented"):
                lines.append(f"  - {_cell(d.line())[:700]}")
    if not unexplained:
        lines.append("- none")
    both = [v for v in verdicts if v.cls == "crash on both sides"]
    lines += ["", f"## Programs that raise on both sides ({len(both)})", ""]
    lines += [f"- seed {v.seed} ({v.capture}): patched `{_cell(v.patched_error)[:200]}`; upstream "
              f"`{_cell(v.oracle_error)[:200]}`" for v in both] or ["- none"]
    lines += ["", "Reproduce one seed: `.venv/bin/python test/fuzz/fuzz_generator.py SEED` prints its program; "
              "`.venv/bin/python bench/fuzz_annotations.py --seeds SEED --show` runs it on both sides and prints "
              "every op of every graph.", ""]
    return "\n".join(lines)


def show(seed: int, patched: dict, oracle: dict) -> str:
    """Every op of every graph of one seed, both sides, for a disagreement's report."""
    out = [f"# seed {seed}", program(seed).source]
    for side, result in (("patched", patched), ("upstream", oracle)):
        record = result["programs"][str(seed)]
        out.append(f"===== {side} torch {result.get('torch')}: error {record['error']}")
        for graph in record["graphs"]:
            out.append(f"-- {graph['graph']}")
            out += [f"   {sub:24} {target[:70]:70} {custom} {'backward' if bw else ''}{' acc' if acc else ''}"
                    for sub, target, custom, bw, acc in graph["ops"]]
        if record["error"]:
            out.append(record["traceback"] or "")
    return "\n".join(out)
