"""status / apply / revert on a scratch copy of whichever release .venv holds, with that release's series.

test_inplace.py covers the tool in depth on the reference release; this is the part every release of
the CI matrix runs: its series builds against its own wheel, applies, and reverts byte for byte, and
applies with git am onto a source checkout at the release's tag.
"""
from __future__ import annotations

import re

import pytest

from scratch_torch import REPO, ScratchTorch, TORCH_RELEASE, torch_wheel
from source_fixtures import git, make_checkout
from torch_overlay.behaviours import behaviours
from torch_overlay.build import build_patched
from torch_overlay.pristine import from_wheel
from torch_overlay.series import load_series
from torch_overlay.source_tree import apply_source


@pytest.fixture
def scratch(tmp_path):
    return ScratchTorch(tmp_path)


def test_status_names_the_release_and_its_series(scratch):
    out = scratch.run("status", check=True).stdout
    # the installed version, with a local label where the wheel has one (2.13.0+cpu)
    assert re.search(rf"^torch {re.escape(TORCH_RELEASE)}(\+\w+)? at {re.escape(str(scratch.site / 'torch'))}$", out, re.M), out
    assert f"series: patches/{TORCH_RELEASE}" in out
    assert "applied: none" in out
    # Which behaviours are upstream's own on this release and which the series brings.
    found = behaviours(load_series(TORCH_RELEASE))
    assert f"native to torch {TORCH_RELEASE}: " + (", ".join(f"{n} (since {s})" for n, s in found.native) or "none") in out
    assert "added by the series: " + ", ".join(found.added) in out
    assert "missing" not in out


def test_apply_then_revert_gives_back_the_release(scratch):
    series = load_series(TORCH_RELEASE)
    before = scratch.snapshot()
    proc = scratch.run("apply", check=True)
    if not series.patches:
        assert "needs nothing" in proc.stdout, proc.stdout
        assert scratch.snapshot() == before
        return
    assert f"applied the torch {TORCH_RELEASE} series" in proc.stdout
    for path, data in build_patched(series, from_wheel(torch_wheel())).items():
        assert (scratch.site / path).read_bytes() == data, path
    scratch.run("revert", check=True)
    assert scratch.snapshot() == before


def test_apply_source_puts_the_series_on_a_checkout_at_the_release_tag(tmp_path, monkeypatch):
    """For a source build: one commit per patch (git am) onto a checkout at tag v<release> holding the
    release wheel's own files."""
    monkeypatch.setenv("TORCH_OVERLAY_PATCHES", str(REPO / "patches"))
    series = load_series(TORCH_RELEASE)
    checkout = make_checkout(tmp_path / "pytorch", REPO / "patches")
    tag = f"v{TORCH_RELEASE}"
    apply_source(checkout)
    subjects = git(checkout, "log", "--reverse", "--format=%s", f"{tag}..HEAD").splitlines()
    assert subjects == [p.subject for p in series.patches]
    for path, data in build_patched(series, from_wheel(torch_wheel())).items():
        assert (checkout / path).read_bytes() == data, path
    assert git(checkout, "status", "--porcelain=v1") == ""


def test_report_profile_needs_the_kernel_annotations_flag(scratch, tmp_path):
    """``report --profile`` on the pristine release is refused before the script runs, saying what to do; where
    the release's series adds Inductor's kernel_annotations flag, it runs once the series is applied."""
    from torch_overlay.report.profile import releases_with_flag

    marker, page = tmp_path / "ran", tmp_path / "r.html"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = scratch.run("report", script, "-o", page, "--profile", rc=2)
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: torch ") and " has no torch._inductor.config.kernel_annotations" in first, \
        proc.stderr
    assert "unchanged: the script was not run; no report was written" in proc.stderr
    assert not marker.exists() and not page.exists()
    if TORCH_RELEASE not in releases_with_flag():
        assert f"the torch-overlay series for {TORCH_RELEASE} does not add it" in first, proc.stderr
        assert "to do: run the report without --profile" in proc.stderr
        return
    assert first.endswith("(the overlay is not applied)"), proc.stderr
    assert "to do: run 'torch-overlay status'" in proc.stderr
    scratch.run("apply", check=True)
    proc = scratch.run("report", script, "-o", page, "--profile", check=True)
    assert marker.exists() and page.is_file() and (tmp_path / "r.trace.json").is_file()
    assert 'id="region-times-none"' in page.read_text(encoding="utf-8")
