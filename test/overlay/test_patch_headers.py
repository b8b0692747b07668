"""The DEP-3 header of every patch of every series says what the patch is, in one form.

- ``Patch-Name`` is the file's name; a name ``<PR>-<slug>`` is a backport of upstream pull request <PR>,
  ``local-<slug>`` a fix of ours, ``upstream-<slug>`` an upstream change whose pull request is not identified.
- ``Origin``: ``local``; or ``upstream, <pull request URL>[, ...]`` (the change as upstream made it); or
  ``backport, <pull request URL>[, ...]`` with a ``Local-Changes:`` field listing what differs from it.
  A backport's first URL is the pull request of its name.
- ``Forwarded``: ``not-needed`` for upstream code; for ours ``no`` (not sent yet: in DEP-3 any value other than
  ``no`` and ``not-needed`` says the patch was sent), ``not-needed``, or the URL of the pull request we opened.
- ``Applied-Upstream``: ``no``, or, for upstream code, the first upstream release with the change, a release of
  a minor this project supports (its release table row). A local patch is ours, never applied upstream: ``no``.
- ``Superseded-Upstream`` (local patches only, optional): the first release where upstream has the patch's
  behaviour by a change of its own (same form, then the upstream pull request or a note), so later series
  drop the patch.
- ``Bug`` (optional): an upstream issue URL.
- ``Stack`` (optional): the patches of the series the pull request sits on (test_stacks.py checks the line).
- ``Test:`` (every local patch; a line of its Description, `` Test: FILE (Class.test, ...)``, as
  continuation lines): the test files that exercise the patch, each in the repository's test tree or added
  by the patch, and the classes and tests it names (a ``*`` in a name matches any run of characters); a
  test it names that passes without the patch too says so (a guard).
- ``From``: the project's identity, whoever's machine made the commit (``torch-overlay refresh`` writes the
  workspace commit's author there; a contributor's git defaults must not end up in the series).
"""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from torch_overlay.series import default_patches_root, load_series, supported_versions

ROOT = default_patches_root()
AUTHOR = "torch-overlay developers <torch-overlay@users.noreply.invalid>"
PULL = r"https://github\.com/pytorch/pytorch/pull/(\d+)"
RELEASES = supported_versions(ROOT)
PATCHES = sorted({p.path.resolve(): p for r in RELEASES for p in load_series(r, ROOT).patches}.items())


def fields_of(path) -> dict[str, str]:
    """The header fields with their continuation lines joined."""
    head = path.read_text().partition("\n---\n")[0]
    fields, key = {}, None
    for line in head.splitlines():
        m = re.match(r"^([A-Z][A-Za-z-]+): (.*)$", line)
        if m and m.group(1) not in ("From", "Date", "Subject"):
            key = m.group(1)
            fields[key] = m.group(2).strip()
        elif key and line.startswith(" "):
            fields[key] += " " + line.strip()
        else:
            key = None
    return fields


@pytest.mark.parametrize("path", [p for p, _ in PATCHES], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_header(path):
    assert path.read_text().split("\n", 2)[1] == f"From: {AUTHOR}", "the patch's author is not the project's"
    fields = fields_of(path)
    name = path.name.removesuffix(".patch")
    assert fields.get("Patch-Name") == name
    assert set(fields) <= {"Description", "Origin", "Forwarded", "Applied-Upstream", "Patch-Name", "Bug",
                           "Local-Changes", "Stack", "Superseded-Upstream"}, sorted(fields)
    origin, forwarded, applied = fields["Origin"], fields["Forwarded"], fields["Applied-Upstream"]
    kind = origin.split(",", 1)[0]
    pulls = re.findall(PULL, origin)
    if name.startswith("local-"):
        assert origin == "local"
        assert re.fullmatch(rf"no|not-needed|{PULL}( \(.*\))?", forwarded), forwarded
        assert applied == "no", "a local patch is not applied upstream: use Superseded-Upstream for upstream's own change"
    else:
        assert "Superseded-Upstream" not in fields, "upstream code says where upstream applied it: Applied-Upstream"
        assert kind in ("upstream", "backport"), origin
        assert forwarded == "not-needed"
        number = re.match(r"(\d+)-", name)
        if number:
            assert pulls and pulls[0] == number.group(1), (name, origin)
        else:
            assert name.startswith("upstream-") and re.search(r"https://github\.com/pytorch/pytorch\b", origin)
    assert ("Local-Changes" in fields) == (kind == "backport"), "a backport lists its Local-Changes, and only it"
    if "Bug" in fields:
        assert re.fullmatch(r"https://github\.com/pytorch/pytorch/issues/\d+( .*)?", fields["Bug"]), fields["Bug"]
    for since in (applied, fields.get("Superseded-Upstream", "no")):
        if since != "no":
            release = re.match(r"(\d+)\.(\d+)\.\d+\b", since)
            assert release, since
            minors = {tuple(v.split(".")[:2]) for v in RELEASES}
            assert release.groups() in minors, f"{since}: not a release of a minor in the release table"


REPO = Path(__file__).resolve().parents[2]  # the test tree the Test: lines name
TEST_FILE = r"\btest/[\w/.-]+\.py\b"


def named_tests_text(path) -> str:
    """The Description from its `Test:` line on, continuation lines joined ("" when it has none)."""
    description = fields_of(path).get("Description", "")
    m = re.search(r"(?:^|\s)Test: ", description)
    return description[m.start():].strip() if m else ""


def created_files(text: str) -> set[str]:
    return set(re.findall(r"^\+\+\+ b/(\S+)$", text, re.M)) - {
        f for f in re.findall(r"^--- a/(\S+)$", text, re.M)}


@pytest.mark.parametrize("path", [p for p, _ in PATCHES if p.name.startswith("local-")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_local_patch_names_its_tests(path):
    """Every local patch names, in a `Test:` line of its Description, the test files that exercise it
    (and, where it names them, their test classes and tests); each one exists in the repository's
    test tree or is a file the patch adds (a 2.15.0 pull request's test in upstream's tree)."""
    text = path.read_text()
    head = text.partition("\n---\n")[0]
    name = path.name.removesuffix(".patch")
    assert len(re.findall(r"^ Test: ", head, re.M)) == 1, \
        f"{name}: its Description has no `Test:` line naming the tests that exercise it (one, as ` Test: FILE (...)`)"
    paragraph = named_tests_text(path)
    files = re.findall(TEST_FILE, paragraph)
    assert files, f"{name}: its Test: line names no test file: {paragraph!r}"
    added = created_files(text)
    sources = []
    for f in files:
        if f in added:
            sources.append(text)
            continue
        assert f"{f} (added by this patch" not in paragraph, f"{name}: it does not add {f}"
        assert (REPO / f).is_file(), f"{name}: its Test: line names {f}, which is neither in the repository nor added"
        sources.append((REPO / f).read_text())
    source = "\n".join(sources)
    words = re.sub(TEST_FILE, " ", paragraph)
    defined = re.findall(r"^\+?\s*def (test_\w+)\(", source, re.M)
    for test in re.findall(r"\btest_[\w*]+", words):
        assert [d for d in defined if fnmatch.fnmatchcase(d, test)], f"{name}: no test {test} in {files}"
    for cls in re.findall(r"\b(Test[A-Z]\w+|[A-Z]\w+Tests)\b", words):
        assert re.search(rf"^\+?class {cls}\b", source, re.M), f"{name}: no class {cls} in {files}"
