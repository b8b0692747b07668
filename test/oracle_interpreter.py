"""The upstream oracle: torch 2.13.0+cpu in its own interpreter (.venv-oracle, made by
scripts/test.sh, or TORCH_OVERLAY_ORACLE_PYTHON), running the same programs as ours."""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ORACLE_PYTHON = Path(os.environ.get("TORCH_OVERLAY_ORACLE_PYTHON", REPO / ".venv-oracle" / "bin" / "python"))
requires_oracle = unittest.skipUnless(
    ORACLE_PYTHON.exists(),
    f"upstream oracle interpreter {ORACLE_PYTHON} does not exist "
    "(create .venv-oracle with torch 2.13.0 or set TORCH_OVERLAY_ORACLE_PYTHON)")


def _stdout(python, args, input=None, timeout=300):
    """What ``python ARGS`` (a program's path, or "-c" and its source) prints, ``input`` on its
    stdin; an AssertionError with its stderr if it fails."""
    out = subprocess.run([str(python), *map(str, args)], input=input, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{python} {args[0]} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def _last_json_line(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def run_json(python, *args):
    """Run ``python ARGS`` and return its last line of output, parsed as JSON."""
    return _last_json_line(_stdout(python, args))


def oracle_json(*args, input=None, timeout=300):
    """``run_json(ORACLE_PYTHON, *ARGS)``, ``input`` on its stdin, through the oracle cache
    (oracle_cache.py): for programs whose output is a function of their arguments, their
    stdin and the repository's test sources alone (they write no file)."""
    from oracle_cache import cached_stdout

    args = [str(a) for a in args]
    return _last_json_line(cached_stdout(ORACLE_PYTHON, args, input,
                                         lambda: _stdout(ORACLE_PYTHON, args, input, timeout)))


def _test_case():
    from torch.testing._internal.common_utils import TestCase

    return TestCase


class OracleProgramCase(_test_case()):
    """A test class comparing one program's output here and under upstream: ``PROGRAM``
    runs once per class under this torch (``cls.ours``) and under the oracle
    (``cls.upstream``). Decorate subclasses with ``requires_oracle``."""

    PROGRAM: Path

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ours = run_json(sys.executable, cls.PROGRAM)
        cls.upstream = oracle_json(cls.PROGRAM)
