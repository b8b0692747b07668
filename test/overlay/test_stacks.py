"""The `Stack:` header line: the patches a pull request of a series sits on (torch_overlay/stacks.py).

A bad line is refused with the problem named: a name the series lacks, the patch itself, a name twice, a patch
applied later, names out of the series' order, a stack that leaves out what its own patches sit on, an empty
name. scripts/pr_stack_check.py applies exactly the stack below each pull request; this file checks the
reading of the line, on small series written here, and that every real series' lines are valid."""
from __future__ import annotations

from pathlib import Path

import pytest

from torch_overlay.errors import OverlayError
from torch_overlay.series import default_patches_root, load_series, supported_versions
from torch_overlay.stacks import GHSTACK_HEADER, declared_stack, ghstack_block, stack_of, stacks

RELEASE = "9.9.0"


def write_series(root: Path, stacks_by_name: dict[str, str | None]) -> Path:
    """A series of one-file patches named as given, in order, each with the Stack line given (None: none)."""
    folder = root / RELEASE
    folder.mkdir(parents=True)
    for name, stack in stacks_by_name.items():
        stack_line = f"Stack: {stack}\n" if stack is not None else ""
        (folder / f"{name}.patch").write_text(
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            "From: torch-overlay developers <torch-overlay@users.noreply.invalid>\n"
            f"Subject: [PATCH] {name}\n\n"
            f"Description: {name}\nOrigin: local\nForwarded: no\nApplied-Upstream: no\nPatch-Name: {name}\n"
            f"{stack_line}---\n"
            f"diff --git a/torch/{name}.py b/torch/{name}.py\nnew file mode 100644\n"
            f"--- /dev/null\n+++ b/torch/{name}.py\n@@ -0,0 +1 @@\n+x = 1\n")
    (folder / "series").write_text("".join(f"{name}.patch\n" for name in stacks_by_name))
    return root


def stack_names(root: Path, name: str) -> list[str]:
    series = load_series(RELEASE, root)
    (patch,) = [p for p in series.patches if p.fields["Patch-Name"] == name]
    return [p.fields["Patch-Name"] for p in stack_of(series, patch)]


def refused(root: Path, name: str) -> str:
    with pytest.raises(OverlayError) as e:
        stack_names(root, name)
    assert e.value.unchanged == "nothing was changed" and "Stack line" in e.value.todo
    return e.value.what


def test_a_stack_is_read_in_order_and_a_patch_without_one_sits_on_nothing(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": "a", "c": "a, b", "d": None})
    assert stack_names(root, "a") == [] and stack_names(root, "d") == []
    assert stack_names(root, "c") == ["a", "b"]
    series = load_series(RELEASE, root)
    assert {n: [p.fields["Patch-Name"] for p in s] for n, s in stacks(series).items()} == {
        "a": [], "b": ["a"], "c": ["a", "b"], "d": []}
    # the one stack a pull-request body opens with: its own Stack line and itself, then the patches above it
    by_name = {p.fields["Patch-Name"]: p for p in series.patches}
    assert ghstack_block(series, by_name["c"]) == f"{GHSTACK_HEADER}\n* __->__ c\n* b\n* a"
    assert ghstack_block(series, by_name["b"]) == (
        f"{GHSTACK_HEADER}\n* __->__ b\n* a\n\nPull requests stacked on this one: c.")
    assert ghstack_block(series, by_name["a"]) == (
        f"{GHSTACK_HEADER}\n* __->__ a\n\nPull requests stacked on this one: b, c.")
    assert ghstack_block(series, by_name["d"]) == ""


def test_a_patch_on_nothing_lists_nothing_below_it_though_a_stack_above_holds_more(tmp_path):
    # b sits on nothing; c sits on a and b: b's body lists no a below it
    series = load_series(RELEASE, write_series(tmp_path, {"a": None, "b": None, "c": "a, b"}))
    by_name = {p.fields["Patch-Name"]: p for p in series.patches}
    assert ghstack_block(series, by_name["b"]) == (
        f"{GHSTACK_HEADER}\n* __->__ b\n\nPull requests stacked on this one: c.")


def test_an_unknown_name_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": "a, nope"})
    assert "its Stack names nope, which is not a patch of the series" in refused(root, "b")


def test_the_patch_itself_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": "a, b"})
    assert "its Stack names the patch itself (b)" in refused(root, "b")


def test_a_patch_applied_later_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": "c", "c": None})
    assert "names c, which the series applies after b" in refused(root, "b")


def test_the_wrong_order_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": None, "c": "b, a"})
    assert "its Stack lists b, a, not in the order the series applies them (a, b)" in refused(root, "c")


def test_a_name_twice_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "c": "a, a"})
    assert "its Stack names a twice" in refused(root, "c")


def test_a_stack_that_leaves_out_what_its_patches_sit_on_is_refused(tmp_path):
    root = write_series(tmp_path, {"a": None, "b": "a", "c": "b"})
    assert "its Stack names b, which sits on a, left out; a stack names every patch below it" in refused(root, "c")


@pytest.mark.parametrize("line", ["", "a,", " , a"])
def test_an_empty_name_is_refused(tmp_path, line):
    root = write_series(tmp_path, {"a": None, "b": line})
    series = load_series(RELEASE, root)
    with pytest.raises(OverlayError, match="has an empty name"):
        declared_stack(series.patches[1])


@pytest.mark.parametrize("release", supported_versions(default_patches_root()))
def test_every_stack_line_of_every_series_is_valid(release):
    stacks(load_series(release))
