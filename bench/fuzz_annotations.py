"""Campaign: fuzz annotated programs against upstream 2.13 and write the table to bench/.

    .venv/bin/python bench/fuzz_annotations.py --seeds 0:500 [--out bench/fuzz-annotations-2.5.1.md]
    .venv/bin/python bench/fuzz_annotations.py --seeds 123 --show     # one seed, every op of both sides
    .venv/bin/python bench/fuzz_annotations.py --models [--oracle pristine]   # annotated HF / timm models

Generates each seed's program (test/fuzz/fuzz_generator.py), runs it under the patched torch in .venv and
under the oracle (.venv-oracle, torch 2.13.0), compares per op and classifies every program
(test/fuzz/fuzz_compare.py). Exit status 1 when a disagreement is unexplained.

--models runs the annotated real-model programs instead (test/fuzz/fuzz_models.py). --oracle pristine
compares against this release as shipped (a reverted scratch copy of .venv's torch) instead of the 2.13
oracle: upstream itself where the release has annotation tracing natively (2.13 and later), and the
only upstream side that can run the timm models (timm needs torchvision, which has no build for the
oracle's CPU-only torch).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "fuzz"))


def seed_range(text: str) -> list:
    """'0:500' (end excluded), '7', '3,9,12' or model programs' names ('hf_llama_sdpa/compile,...')."""
    if ":" in text:
        a, b = text.split(":")
        return list(range(int(a), int(b)))
    return [int(s) if s.lstrip("-").isdigit() else s for s in text.split(",")]


# The first release whose pristine torch traces annotations as upstream does (shared/reference/torch-versions.md).
FIRST_UPSTREAM_RELEASE = (2, 13)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0:500"))
    parser.add_argument("--out", type=Path, help="default: bench/fuzz-annotations-<the .venv release>.md")
    parser.add_argument("--batch", type=int, default=25, help="seeds per interpreter")
    parser.add_argument("--show", action="store_true", help="print every op of both sides (no table written)")
    parser.add_argument("--models", action="store_true", help="the annotated model programs instead of seeds")
    parser.add_argument("--oracle", choices=("2.13", "pristine"), default="2.13",
                        help="upstream side: the 2.13 oracle (default) or this release as shipped (2.13 and later)")
    parser.add_argument("--reuse", action="store_true",
                        help="classify what an earlier run left in build/fuzz/campaign (the seeds both sides finished)")
    args = parser.parse_args(argv)
    # Imported after the arguments are read: importing torch's test utilities parses sys.argv (it took --help).
    from fuzz_compare import compare_runs
    from fuzz_models import MODEL_PROGRAMS, needs_torchvision
    from fuzz_run import TORCH_RELEASE, WORK, load_sides, report, run, show

    kw = {"batch": args.batch}
    if args.oracle == "pristine":
        if tuple(map(int, TORCH_RELEASE.split(".")[:2])) < FIRST_UPSTREAM_RELEASE:
            parser.error(f"--oracle pristine: torch {TORCH_RELEASE} as shipped does not trace annotations as upstream "
                         "does (2.13 and later do); nothing was run. Use the 2.13 oracle, or set up 2.13 or later.")
        from differential_sides import pristine_python

        kw["oracle_python"] = pristine_python(WORK / "pristine-torch")
    if args.models:
        args.seeds = [k for k in MODEL_PROGRAMS if args.oracle == "pristine" or not needs_torchvision(k)]
    if args.reuse:
        patched, oracle = load_sides(args.seeds)
        verdicts, seconds = compare_runs(patched, oracle, TORCH_RELEASE), 0.0
    else:
        verdicts, patched, oracle, seconds = run(args.seeds, **kw)
    if args.show:
        for seed in args.seeds:
            print(show(seed, patched, oracle))
        for v in verdicts:
            print(f"seed {v.seed}: {v.cls} {v.row}")
            for d in v.differences:
                print(f"  [{d.cause}] {d.line()}")
        return 0
    command = ".venv/bin/python bench/fuzz_annotations.py " + (
        "--models" if args.models else f"--seeds {_arg(sys.argv)}") + (" --oracle pristine" if args.oracle == "pristine"
                                                                        else "") + (" --reuse" if args.reuse else "")
    text = report(verdicts, patched, oracle, seconds, command)
    name = f"fuzz-{'models' if args.models else 'annotations'}-{TORCH_RELEASE}"
    out = args.out or REPO / "bench" / (name + ("-vs-pristine" if args.oracle == "pristine" else "") + ".md")
    out.write_text(text)
    print(text)
    return 0 if all(v.explained for v in verdicts) else 1


def _arg(argv: list[str]) -> str:
    return argv[argv.index("--seeds") + 1] if "--seeds" in argv else "0:500"


if __name__ == "__main__":
    sys.exit(main())
