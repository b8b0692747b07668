"""Annotated programs against upstream: a fixed range of generated programs, patched torch vs upstream 2.13.

Each seed's program (fuzz_generator.py: nested annotate and annotate_fn, views and in-place ops on views,
checkpointing with dropout, graph breaks inside annotate, nested autograd.Functions, views of mutated
intermediates as outputs; torch.compile, aot_module, make_fx, strict and non-strict export) runs under
the patched torch of this release and under the oracle (.venv-oracle, torch 2.13.0); fuzz_compare.py
compares the custom of every op both sides emit equally often. A difference passes only as a row of
fuzz_documented.py. bench/fuzz_annotations.py runs a long campaign and writes its table to bench/.

CI_SEEDS agree with upstream on 2.5.1 (equal, or different only as documented rows say). A seed of the
campaign that disagrees is a defect of the series still open; it is listed, with what differs, in
bench/fuzz-annotations-<release>.md and left out of CI_SEEDS until fixed (the last one on 2.5.1, seed 195,
differs only as the row "views regenerated at an output: annotated" says since local-view-replay-outputs).
TORCH_OVERLAY_FUZZ_SEEDS=3,8 (or 0:40) runs other seeds instead.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_compare import EQUAL  # noqa: E402
from fuzz_documented import BEYOND_UPSTREAM, RELEASE_NUMBERS_OTHERWISE, UPSTREAM_ONLY  # noqa: E402
from fuzz_generator import CAPTURES, generate  # noqa: E402
from fuzz_run import REPO, WORK, report, run  # noqa: E402
from oracle_interpreter import requires_oracle  # noqa: E402

CI_SEEDS = [3, 4, 6, 7, 11, 12, 15, 17, 18, 24, 27, 41]  # every capture path and shape; all agree on 2.5.1
# Every shape the generator makes, each present in CI_SEEDS (test_ci_seeds_cover_every_shape).
SHAPES = {"annotate", "annotate_nested", "annotate_list_of_pairs", "annotate_fn_function", "annotate_fn_module",
          "view", "inplace_view", "checkpoint", "checkpoint_dropout", "dropout", "custom_function_nested",
          "output_view_of_mutated", "graph_break_in_annotate"}


def _seeds() -> list[int]:
    text = os.environ.get("TORCH_OVERLAY_FUZZ_SEEDS")
    if not text:
        return CI_SEEDS
    if ":" in text:
        a, b = text.split(":")
        return list(range(int(a), int(b)))
    return [int(s) for s in text.split(",")]


class TestFuzzGenerator(TestCase):
    def test_program_is_a_function_of_its_seed(self):
        self.assertEqual(generate(7), generate(7))
        self.assertNotEqual(generate(7).source, generate(8).source)

    def test_ci_seeds_cover_every_shape_and_capture_path(self):
        programs = [generate(s) for s in CI_SEEDS]
        self.assertEqual(SHAPES - set().union(*(p.features for p in programs)), set())
        self.assertEqual(set(CAPTURES) - {p.capture for p in programs}, set())

    def test_readme_table_lists_every_row(self):
        """README's "Where annotated programs differ from upstream" table is fuzz_documented's rows."""
        text = (REPO / "README.md").read_text()
        section = text.split("### Where annotated programs differ from upstream", 1)[1]
        rows = [line for line in section.split("\n\n", 2)[1].splitlines() if line.startswith("|")][2:]
        cells = [[c.strip().strip("`") for c in row.strip("|").split("|")] for row in rows]
        self.assertEqual([(c[0], c[1]) for c in cells],
                         [(r.key, r.patch) for r in BEYOND_UPSTREAM] + [(r.key, "(upstream only)") for r in UPSTREAM_ONLY]
                         + [(r.key, "(release)") for r in RELEASE_NUMBERS_OTHERWISE])


@requires_oracle
class TestFuzzAnnotatedProgramsAgainstUpstream(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        seeds = _seeds()
        cls.verdicts, patched, oracle, seconds = run(seeds, batch=len(seeds), work=WORK / "ci")
        cls.table = report(cls.verdicts, patched, oracle, seconds, "test/fuzz/test_fuzz_annotations.py")
        print(cls.table)  # shown with pytest -s

    def test_no_unexplained_disagreement(self):
        unexplained = [v for v in self.verdicts if not v.explained]
        self.assertEqual([v.seed for v in unexplained], [], self.table)

    def test_programs_ran_and_ops_were_compared(self):
        self.assertEqual([v.seed for v in self.verdicts], _seeds())
        # Most programs agree op for op, and the comparison covers a real share of the ops.
        self.assertGreater(sum(v.cls == EQUAL for v in self.verdicts), len(self.verdicts) // 3)
        self.assertGreater(sum(v.compared_ops for v in self.verdicts), sum(v.total_ops for v in self.verdicts) // 2)


if __name__ == "__main__":
    run_tests()
