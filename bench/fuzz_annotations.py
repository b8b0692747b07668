"""Campaign: fuzz annotated programs against upstream 2.13 and write the table to bench/.

    .venv/bin/python bench/fuzz_annotations.py --seeds 0:500 [--out bench/fuzz-annotations-2.5.1.md]
    .venv/bin/python bench/fuzz_annotations.py --seeds 123 --show     # one seed, every op of both sides

Generates each seed's program (test/fuzz/fuzz_generator.py), runs it under the patched torch in .venv and
under the oracle (.venv-oracle, torch 2.13.0), compares per op and classifies every program
(test/fuzz/fuzz_compare.py). Exit status 1 when a disagreement is unexplained.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "fuzz"))


def seed_range(text: str) -> list[int]:
    """'0:500' (end excluded), '7' or '3,9,12'."""
    if ":" in text:
        a, b = text.split(":")
        return list(range(int(a), int(b)))
    return [int(s) for s in text.split(",")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_range, default=seed_range("0:500"))
    parser.add_argument("--out", type=Path, help="default: bench/fuzz-annotations-<the .venv release>.md")
    parser.add_argument("--batch", type=int, default=25, help="seeds per interpreter")
    parser.add_argument("--show", action="store_true", help="print every op of both sides (no table written)")
    parser.add_argument("--reuse", action="store_true",
                        help="classify what an earlier run left in build/fuzz/campaign (the seeds both sides finished)")
    args = parser.parse_args(argv)
    # Imported after the arguments are read: importing torch's test utilities parses sys.argv (it took --help).
    from fuzz_compare import compare_runs
    from fuzz_run import TORCH_RELEASE, load_sides, report, run, show

    if args.reuse:
        patched, oracle = load_sides(args.seeds)
        verdicts, seconds = compare_runs(patched, oracle, TORCH_RELEASE), 0.0
    else:
        verdicts, patched, oracle, seconds = run(args.seeds, batch=args.batch)
    if args.show:
        for seed in args.seeds:
            print(show(seed, patched, oracle))
        for v in verdicts:
            print(f"seed {v.seed}: {v.cls} {v.row}")
            for d in v.differences:
                print(f"  [{d.cause}] {d.line()}")
        return 0
    command = f".venv/bin/python bench/fuzz_annotations.py --seeds {_arg(sys.argv)}" + (" --reuse" if args.reuse else "")
    text = report(verdicts, patched, oracle, seconds, command)
    out = args.out or REPO / "bench" / f"fuzz-annotations-{TORCH_RELEASE}.md"
    out.write_text(text)
    print(text)
    return 0 if all(v.explained for v in verdicts) else 1


def _arg(argv: list[str]) -> str:
    return argv[argv.index("--seeds") + 1] if "--seeds" in argv else "0:500"


if __name__ == "__main__":
    sys.exit(main())
