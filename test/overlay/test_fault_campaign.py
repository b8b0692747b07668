"""The CI slice of bench/fault_campaign.py: one trial of every scenario, no violation.

The whole campaign (600 trials and a real pip reinstall) is run by hand; its figures are in the README.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from scratch_torch import REPO

sys.path.insert(0, str(REPO / "bench"))
from fault_campaign import SCENARIOS, campaign  # noqa: E402


def test_one_trial_of_every_scenario_has_no_violation():
    root = Path(tempfile.mkdtemp(prefix="fault-campaign-"))  # not under pytest's 0700 folder: nobody must reach it
    root.chmod(0o755)
    try:
        lines = []
        violations = campaign(len(SCENARIOS), seed=1, only=[], pip_trials=0, root=root, out=lines.append)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert violations == 0, "\n".join(lines)
    assert lines[-1].split()[:3] == ["all", str(len(SCENARIOS)), "0"], "\n".join(lines)
