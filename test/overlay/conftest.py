"""Which tool tests run on which release.

The tool itself is the same code on every release; most of its tests check it against the real
files of the reference release (2.5.1), its series and its patch names. Those run when .venv holds
2.5.1 (CI's first release). On every other release the release-generic ones run: the demo, the
series/port logic, and apply/status/revert on a scratch copy of that release (test_release_apply.py).
A test of one release only (RELEASE_ONLY) runs where .venv holds that release.
"""
from __future__ import annotations

import pytest

from scratch_torch import TORCH_RELEASE

REFERENCE_RELEASE = "2.5.1"
RELEASE_GENERIC = {"test_demo.py", "test_series.py", "test_port.py", "test_release_apply.py", "test_patch_headers.py",
                   "test_stacks.py", "test_pr_tools.py", "test_report_profile.py",
                   "test_series_is_refresh_output.py"}
# Tests of one release only, run where .venv holds it (CI's step of that release), and on no other.
RELEASE_ONLY = {
    # apply-source, refresh and develop on Debian's source package of PyTorch 2.6.0, the one release Debian
    # ships with the whole upstream tree (scripts/debian_source.py)
    "test_apply_source_debian.py": "2.6.0",
    # the series offered upstream: each local patch carries an upstream test and a pull-request body
    "test_upstream_prs.py": "2.15.0",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent.name != "overlay":
            continue
        only = RELEASE_ONLY.get(item.path.name)
        if only and TORCH_RELEASE != only:
            item.add_marker(pytest.mark.skip(
                reason=f"a torch {only} test (.venv holds {TORCH_RELEASE}); run: "
                       f"bash scripts/test.sh --torch {only} test/overlay/{item.path.name}"))
        elif not only and TORCH_RELEASE != REFERENCE_RELEASE and item.path.name not in RELEASE_GENERIC:
            item.add_marker(pytest.mark.skip(
                reason=f"checks the tool against the reference release {REFERENCE_RELEASE}'s files "
                       f"(.venv holds {TORCH_RELEASE}); run: bash scripts/test.sh --torch 2.5.1"))
