"""Run the no-annotation differential for the release in .venv and write its table.

    .venv/bin/python test/differential/differential_run.py [--all | PROGRAM ...] [--out bench/FILE.md]

Runs the corpus (the CI slice unless --all or names are given) under a pristine copy of the installed
release and under the patched torch, compares them (differential_compare.py) and prints, or writes as
Markdown, the figures and every difference by cause. scripts/no_annotation_differential.sh runs it with
--all and writes bench/no-annotation-differential-<release>.md.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from differential_compare import compare, figures, tally  # noqa: E402
from differential_sides import PATCHED_PYTHON, REPO, TORCH_RELEASE, observe, pristine_python  # noqa: E402
from documented_differences import PENDING  # noqa: E402
from no_annotation_corpus import CI_SLICE, PROGRAMS, not_run  # noqa: E402

WORK = REPO / "build" / "differential"  # under the repo, as .venv: Dynamo prints user paths relative to torch's


def run_sides(programs: list[str]) -> tuple[dict, dict, float]:
    """(pristine observation, patched observation, seconds)."""
    start = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "pristine").mkdir(parents=True)
    pristine = observe(pristine_python(WORK / "pristine"), programs, WORK / "pristine.json")
    # The scratch copy hard-links .venv's torch (about 1.2 GB): left here, it would keep this release's files on
    # disk after .venv moves to another release (CI's next step). The observations stay in the JSON files.
    shutil.rmtree(WORK / "pristine")
    patched = observe(PATCHED_PYTHON, programs, WORK / "patched.json")
    return pristine, patched, time.monotonic() - start


def report(pristine: dict, patched: dict, seconds: float) -> str:
    diffs = compare(pristine, patched, TORCH_RELEASE)
    lines = [f"# No-annotation differential, torch {TORCH_RELEASE}", "",
             f"Pristine {pristine['torch']} vs patched {patched['torch']}, {seconds:.0f} s. "
             f"Command: `bash scripts/no_annotation_differential.sh --torch {TORCH_RELEASE}`.", "", "| compared | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in figures(pristine).items()]
    lines += ["", "## Differences by cause (count per program)", "", "| cause | what | key | program | count |",
              "|---|---|---|---|---|"]
    for (cause, what, key, program), n in sorted(tally(diffs).items()):
        lines.append(f"| {cause} | {what} | {key} | {program} | {n} |")
    seen = {d.cause for d in diffs}
    idle = [p.item for p in PENDING if f"pending: {p.item}" not in seen]
    lines += ["", "## Pending entries that matched nothing (fixed here? remove the entry)", ""]
    lines += [f"- {item}" for item in idle] or ["- none"]
    unexplained = [d for d in diffs if d.cause == "unexplained"]
    lines += ["", f"## Unexplained differences ({len(unexplained)})", ""]
    lines += [f"- {d.line()[:400]}" for d in unexplained[:200]] or ["- none"]
    missed = {**not_run(pristine), **not_run(patched)}
    lines += ["", f"## Programs that did not run to the end ({len(missed)}: nothing of theirs was compared)", ""]
    lines += [f"- {n}: {e.splitlines()[0][:200]}" for n, e in missed.items()] or ["- none"]
    errors = {n: p["error"] for n, p in pristine["programs"].items() if p["error"] and n not in missed}
    lines += ["", "## Programs that raise on both sides (the error texts are compared)", ""]
    lines += [f"- {n}: {e.splitlines()[0][:200]}" for n, e in errors.items()] or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*")
    parser.add_argument("--all", action="store_true", help="the whole corpus")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    args = parser.parse_args(argv)
    programs = list(PROGRAMS) if args.all else (args.programs or CI_SLICE)
    pristine, patched, seconds = run_sides(programs)
    text = report(pristine, patched, seconds)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    missed = {**not_run(pristine), **not_run(patched)}
    if missed:
        print(f"differential_run: {len(missed)} program(s) did not run to the end, so the table is incomplete: "
              f"{', '.join(sorted(missed))}. Fix the environment (scripts/setup.sh) and run again.", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
