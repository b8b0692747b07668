"""The 2.15.0 series is what torch-overlay offers upstream: each local patch is a pull request.

Each one adds its test to upstream's test tree (a new file under test/, run by scripts/pr_stack_check.py in CI's
2.15.0 step, on the pristine release with the patch's stack, with and without the patch) and has its
pull-request body in patches/2.15.0/prs/<patch name>.md. A patch that does not apply alone names the patches
it sits on in a `Stack:` header line; its body, and the body of each patch of its stack, opens with the stack
as ghstack lists it."""
from __future__ import annotations

import pytest

from scratch_torch import REPO
from torch_overlay.series import load_series
from torch_overlay.stacks import GHSTACK_HEADER, ghstack_block

PR_RELEASE = "2.15.0"
SECTIONS = ("## Summary", "## Issue", "## Before / after", "## Test plan")
SERIES = load_series(PR_RELEASE, REPO / "patches")
LOCAL = [p for p in SERIES.patches if p.fields["Patch-Name"].startswith("local-")]


@pytest.mark.parametrize("patch", LOCAL, ids=lambda p: p.fields["Patch-Name"])
def test_local_patch_adds_an_upstream_test_named_in_its_header_and_pr_body(patch):
    tests = [path for path in patch.created if path.startswith("test/")]
    assert tests, f"{patch.name} adds no test file under test/"
    body_file = REPO / "patches" / PR_RELEASE / "prs" / f"{patch.fields['Patch-Name']}.md"
    assert body_file.is_file(), f"{patch.name} has no pull-request body {body_file}"
    body = body_file.read_text()
    header = " ".join(patch.path.read_text().partition("\n---\n")[0].split())
    assert body.startswith("# "), f"{body_file} has no title line"
    assert [s for s in SECTIONS if s not in body] == [], body_file
    for test in tests:
        # upstream's run_test.py never collects test/fx/ (test/test_fx.py imports the classes it runs there)
        assert not test.startswith("test/fx/"), f"{test}: upstream's run_test.py would not collect it"
        assert f"Test: {test}" in header, f"{patch.name}'s Description does not name {test}"
        assert test in body, f"{body_file}'s test plan does not name {test}"


@pytest.mark.parametrize("patch", LOCAL, ids=lambda p: p.fields["Patch-Name"])
def test_a_pr_body_opens_with_each_stack_it_is_part_of(patch):
    body = (REPO / "patches" / PR_RELEASE / "prs" / f"{patch.fields['Patch-Name']}.md").read_text()
    block = ghstack_block(SERIES, patch)
    title, _, rest = body.partition("\n")
    if block:
        assert rest.startswith(f"\n{block}\n\n## Summary"), f"the body should open with:\n{block}"
    else:
        assert GHSTACK_HEADER not in body, "a patch in no stack lists none"


def test_every_pr_body_belongs_to_a_patch_of_the_series():
    names = {p.fields["Patch-Name"] for p in SERIES.patches}
    bodies = {f.stem for f in (REPO / "patches" / PR_RELEASE / "prs").glob("*.md")}
    assert bodies - names == set()
