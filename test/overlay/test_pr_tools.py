"""The pieces of the pull-request checks that need no torch: which combinations of patches
scripts/pr_stack_check.py runs, and which ruff findings scripts/ruff_upstream.py gives to a series."""
from __future__ import annotations

import sys

from scratch_torch import REPO
from test_stacks import RELEASE, write_series
from torch_overlay.series import load_series

sys.path.insert(0, str(REPO / "scripts"))
import pr_stack_check  # noqa: E402
import ruff_upstream  # noqa: E402


def test_each_pull_request_runs_with_its_stack_and_without_itself_and_stacks_share_runs(tmp_path):
    root = write_series(tmp_path, {"local-a": None, "local-b": "local-a", "local-c": "local-a, local-b",
                                   "local-d": None})
    runs, prs = pr_stack_check.plan(load_series(RELEASE, root), [])
    assert sorted(runs) == [(), ("local-a",), ("local-a", "local-b"), ("local-a", "local-b", "local-c"),
                            ("local-d",)]
    assert [(p.fields["Patch-Name"], [s.fields["Patch-Name"] for s in st]) for p, st in prs] == [
        ("local-a", []), ("local-b", ["local-a"]), ("local-c", ["local-a", "local-b"]), ("local-d", [])]


def test_only_names_pull_requests_of_the_series(tmp_path):
    import pytest

    from torch_overlay.errors import OverlayError

    root = write_series(tmp_path, {"local-a": None, "local-b": "local-a"})
    runs, prs = pr_stack_check.plan(load_series(RELEASE, root), ["local-b"])
    assert sorted(runs) == [("local-a",), ("local-a", "local-b")]
    with pytest.raises(OverlayError, match="--only names local-x, not a pull request"):
        pr_stack_check.plan(load_series(RELEASE, root), ["local-x"])


def test_added_lines_are_the_inserted_and_changed_ones():
    before = "a\nb\nc\n"
    after = "a\nB\nc\nd\n"
    assert ruff_upstream.added_lines(before, after) == {2, 4}


def test_a_finding_is_the_series_on_an_added_line_or_when_new_to_the_file():
    before = [(3, "E501", "Line too long (90 > 88)"), (1, "F401", "`os` imported but unused")]
    after = [(5, "E501", "Line too long (90 > 88)"),  # the release's line, moved: not the series'
             (6, "E501", "Line too long (90 > 88)"),  # an added line of the same length: the series'
             (1, "F401", "`os` imported but unused"),  # the release's own
             (2, "F401", "`copy` imported but unused")]  # a release import the series left unused
    assert ruff_upstream.series_findings(before, after, added={6}) == [
        (2, "F401", "`copy` imported but unused"), (6, "E501", "Line too long (90 > 88)")]
