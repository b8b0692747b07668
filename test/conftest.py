"""How scripts/test.sh spreads the test files over pytest-xdist workers (``--dist loadfile``).

Each file runs whole in one worker, as loadfile does, except that the files that build and pip-install a
whole torch wheel share one worker: each holds a rebuilt wheel and an installed copy of torch (about 2.6 GB
for 2.5.1) while its tests run, and on two workers at once they filled a CI machine's /tmp.
"""
from __future__ import annotations

import pytest

# Files whose module fixtures hold a rebuilt torch wheel and a venv with it installed (test_rebuild_wheel's
# rebuilt/installed, which test_two_ranks reuses): run one after the other, never side by side.
WHEEL_INSTALLING_FILES = ("test/overlay/test_rebuild_wheel.py", "test/overlay/test_two_ranks.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class WheelInstallingFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return WHEEL_INSTALLING_FILES[0] if path in WHEEL_INSTALLING_FILES else path

    return WheelInstallingFilesTogether(config, log)
