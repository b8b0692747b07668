"""The README's table of series ("release | patches | backports | local fixes | stored in another release's folder")
says what patches/<release>/series holds.

The table is what a reader checks before choosing a release; it was written by hand and drifted as patches were
added and folded (every row was off by one or two). This compares each of its figures with the series files, so a
change to a series that leaves the table stale fails here, on any release's CI step (it reads no torch).
"""
from __future__ import annotations

import re
from pathlib import Path

from torch.testing._internal.common_utils import TestCase, run_tests
from torch_overlay.series import default_patches_root, series_entries, supported_versions

README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = "| release | patches | backports | local fixes | stored in another release's folder |"


def _readme_rows() -> dict[str, dict[str, int]]:
    """Each release named in the table, with the four figures its row gives it (a row naming several releases,
    "2.6.0, 2.7.1", gives each of them its own figure in every column, or one figure they share)."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows: dict[str, dict[str, int]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        releases = [r.strip() for r in cells[0].split(",")]
        columns = []
        for cell in cells[1:5]:
            numbers = [int(n) for n in re.findall(r"\d+", cell)]
            columns.append(numbers * len(releases) if len(numbers) == 1 else numbers)
        for i, release in enumerate(releases):
            rows[release] = dict(zip(("patches", "backports", "local", "elsewhere"), (c[i] for c in columns)))
    return rows


def _series_counts(release: str) -> dict[str, int]:
    entries = series_entries(default_patches_root() / release / "series")
    backports = sum(Path(e).name[0].isdigit() for e in entries)  # named for the upstream PR they backport
    return {"patches": len(entries), "backports": backports, "local": len(entries) - backports,
            "elsewhere": sum(e.startswith("../") for e in entries)}


class TestReadmeSeriesTable(TestCase):
    def test_every_release_with_a_series_has_a_row(self):
        self.assertEqual(sorted(_readme_rows()), sorted(supported_versions(default_patches_root())))

    def test_each_row_gives_its_series_counts(self):
        rows = _readme_rows()
        for release in supported_versions(default_patches_root()):
            with self.subTest(release=release):
                self.assertEqual(rows.get(release), _series_counts(release),
                                 f"README.md's series table is stale for {release}: write what "
                                 f"patches/{release}/series holds")


if __name__ == "__main__":
    run_tests()
