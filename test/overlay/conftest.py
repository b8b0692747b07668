"""Which tool tests run on which release.

The tool itself is the same code on every release; most of its tests check it against the real
files of the reference release (2.5.1), its series and its patch names. Those run when .venv holds
2.5.1 (CI's first release). On every other release the release-generic ones run: the demo, the
series/port logic, and apply/status/revert on a scratch copy of that release (test_release_apply.py).
"""
from __future__ import annotations

import pytest

from scratch_torch import TORCH_RELEASE

REFERENCE_RELEASE = "2.5.1"
RELEASE_GENERIC = {"test_demo.py", "test_series.py", "test_port.py", "test_release_apply.py", "test_patch_headers.py"}


def pytest_collection_modifyitems(config, items):
    if TORCH_RELEASE == REFERENCE_RELEASE:
        return
    skip = pytest.mark.skip(reason=f"checks the tool against the reference release {REFERENCE_RELEASE}'s files "
                                   f"(.venv holds {TORCH_RELEASE}); run: bash scripts/test.sh --torch 2.5.1")
    for item in items:
        if item.path.parent.name == "overlay" and item.path.name not in RELEASE_GENERIC:
            item.add_marker(skip)
