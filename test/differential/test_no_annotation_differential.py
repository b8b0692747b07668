"""No annotation, nothing else changes: the patched torch against the pristine torch of the same release.

Runs the CI slice of the corpus (no_annotation_corpus.CI_SLICE) under a pristine copy of the installed
release and under the patched torch, and compares results bitwise, graph code, node meta key by key,
guards, recompiles, counters, warnings, errors and the touched modules' names (differential_compare.py).
A difference passes only as a row of documented_differences.DOCUMENTED (a backported upstream PR makes it,
below the release where upstream does it) or a PENDING entry (a known regression with its issue item).
scripts/no_annotation_differential.sh runs the whole corpus and writes the table to bench/.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from differential_compare import UNEXPLAINED, compare  # noqa: E402
from differential_run import report, run_sides  # noqa: E402
from differential_sides import REPO, TORCH_RELEASE  # noqa: E402
from documented_differences import DOCUMENTED, UPSTREAM_MODULE_NAMES, release_tuple  # noqa: E402
from no_annotation_corpus import CI_SLICE, not_run  # noqa: E402
from torch_overlay.series import load_series  # noqa: E402

PROGRAMS = list(dict.fromkeys(CI_SLICE + [r.example_program for r in DOCUMENTED if r.example_program in CI_SLICE]))
_RUN = {}


def differential():
    """(pristine, patched, differences), computed once per test session."""
    if not _RUN:
        pristine, patched, seconds = run_sides(PROGRAMS)
        _RUN.update(pristine=pristine, patched=patched, diffs=compare(pristine, patched, TORCH_RELEASE))
        print(report(pristine, patched, seconds))  # shown with pytest -s, and on failure
    return _RUN["pristine"], _RUN["patched"], _RUN["diffs"]


class TestNoAnnotationDifferential(TestCase):
    def test_no_unexplained_difference(self):
        _, _, diffs = differential()
        unexplained = [d.line()[:600] for d in diffs if d.cause == UNEXPLAINED]
        self.assertEqual(len(unexplained), 0, "differences no documented row or pending entry explains:\n"
                         + "\n".join(unexplained[:40]))

    def test_every_program_ran_on_both_sides(self):
        pristine, patched, _ = differential()
        self.assertEqual(sorted(pristine["programs"]), sorted(PROGRAMS))
        self.assertEqual(sorted(patched["programs"]), sorted(PROGRAMS))
        # ... and ran to the end: only the programs that exist to compare an error raised.
        self.assertEqual(not_run(pristine), {})
        self.assertEqual(not_run(patched), {})
        # The corpus really exercises the capture paths: graphs and nodes were compared.
        self.assertGreater(sum(len(p["graphs"]) for p in pristine["programs"].values()), 20)

    def test_readme_table_lists_every_row(self):
        """README's "What a patched torch changes when nothing is annotated" table is DOCUMENTED."""
        text = (REPO / "README.md").read_text()
        section = text.split("### What a patched torch changes when nothing is annotated", 1)[1]
        rows = [line for line in section.split("\n\n", 2)[1].splitlines() if line.startswith("|")][2:]
        cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
        self.assertEqual([(c[0].strip("`"), c[2], c[3]) for c in cells],
                         [(r.key, r.upstream, r.first_upstream) for r in DOCUMENTED])

    def test_module_names_are_upstreams(self):
        """Each name the module-names row allows is in that module of upstream torch (the 2.13 oracle)."""
        oracle = REPO / ".venv-oracle" / "bin" / "python"
        if not oracle.exists():
            self.skipTest("no .venv-oracle (bash scripts/test.sh creates it)")
        code = ("import importlib, sys\nfor q in sys.argv[1:]:\n    m, n = q.rsplit('.', 1)\n"
                "    print(q, hasattr(importlib.import_module(m), n))")
        out = subprocess.run([str(oracle), "-c", code, *UPSTREAM_MODULE_NAMES], capture_output=True, text=True,
                             check=True).stdout
        missing = [line.split()[0] for line in out.splitlines() if line.endswith("False")]
        self.assertEqual(missing, [])


def _carried(row) -> bool:
    """Whether this release's series carries the row's patch (a row naming its patches by name; a row naming
    them otherwise, "the backports", counts as carried): a row whose patches the series leaves out, such as a
    fix of something the release does not have yet, allows no difference there."""
    names = [n.strip() for n in row.patch.split(",")]
    if not all(re.fullmatch(r"[\w.-]+", n) for n in names):
        return True
    series = {p.fields["Patch-Name"] for p in load_series(TORCH_RELEASE, REPO / "patches").patches}
    return any(n in series for n in names)


def _row_test(row):
    def test(self):
        pristine, patched, diffs = differential()
        mine = [d for d in diffs if d.cause == f"documented: {row.key}"]
        if release_tuple(TORCH_RELEASE) >= release_tuple(row.first_upstream) or not _carried(row):
            # Upstream does it itself here: the series must not add a difference of its own on that key.
            self.assertEqual(mine, [])
            return
        # The difference is real: the example program shows it against pristine ...
        self.assertTrue([d for d in mine if d.program == row.example_program],
                        f"{row.key}: no difference from pristine in {row.example_program}")
        # ... and limited to what the row allows: on the row's keys, no difference of another shape.
        keys = set(re.split(r",\s*", row.key.split(" of ")[0])) if row.key != "module names" else set()
        others = [d.line()[:300] for d in diffs if d.what == "meta" and d.key in keys and d.cause == UNEXPLAINED]
        self.assertEqual(others, [])
    test.__doc__ = f"README row {row.key!r}: {row.change}"
    return test


for _row in DOCUMENTED:
    setattr(TestNoAnnotationDifferential, "test_row_" + re.sub(r"\W+", "_", _row.key).strip("_"), _row_test(_row))


if __name__ == "__main__":
    run_tests()
