"""The tests a release's patches carry in upstream's test tree, on the patched and on the pristine torch.

A local patch that is written as an upstream pull request (the 2.15.0 series) adds its test as a new file under
test/, as the pull request would. An installed torch has no test tree, so `torch-overlay apply` leaves those
files out; this script writes them, from the patches, into build/series-tests/<release>/ and runs them:

- with .venv's torch, patched with the series: every test must pass;
- with a pristine copy of the same release (test/overlay/scratch_torch.py: a scratch installation on which
  `torch-overlay revert` restored the release's files): every file must fail, which shows that it tests what
  its patch changes.

One pytest process per side (importing torch dominates the cost).
  usage: .venv/bin/python scripts/series_tests.py [--release R]   (default: the release .venv holds)
Exit status 0 when both hold, 1 otherwise (each file's outcome is printed).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "test" / "overlay"))

from torch_overlay.series import TEST_TREE, Series, load_series  # noqa: E402

PATCHED_PYTHON = REPO / ".venv" / "bin" / "python"


def tests_by_patch(series: Series) -> dict[str, list[str]]:
    """Patch name -> the files under test/ it adds."""
    return {p.fields["Patch-Name"]: [c for c in p.created if c.startswith(TEST_TREE)] for p in series.patches}


def write_tests(series: Series, dest: Path) -> list[str]:
    """Write the test files the series adds into ``dest`` (a fresh folder), from the patches themselves."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    for patch in series.patches:
        subprocess.run(["git", "apply", f"--include={TEST_TREE}*", str(patch.path)], cwd=dest, check=True)
    shutil.rmtree(dest / ".git")
    return sorted(series.tests)


@dataclass
class Outcome:
    passed: int = 0
    failed: int = 0  # failures and errors (a collection error counts: the file cannot run)


def run_pytest(python: Path, root: Path, files: list[str], report: Path) -> dict[str, Outcome]:
    """Each file's outcome under ``python`` (one pytest process, rooted at ``root``)."""
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                    "-c", "/dev/null", f"--junitxml={report}", *files], cwd=root, capture_output=True, text=True)
    outcomes = {f: Outcome() for f in files}
    for case in ET.parse(report).iter("testcase"):
        classname = case.get("classname", "")
        file = next((f for f in files if classname.startswith(f[:-len(".py")].replace("/", "."))), None)
        if file is None:
            continue
        bad = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        if bad:
            outcomes[file].failed += 1
        elif not skipped:
            outcomes[file].passed += 1
    return outcomes


def check(release: str, out: Path) -> list[str]:
    """Problems found (empty when every test passes patched and every file fails pristine)."""
    from scratch_torch import ScratchTorch

    series = load_series(release)
    tests_dir = out / release
    files = write_tests(series, tests_dir)
    problems = [f"{name} adds no test under {TEST_TREE}" for name, tests in tests_by_patch(series).items()
                if name.startswith("local-") and not tests]
    if not files:
        return problems
    patched = run_pytest(PATCHED_PYTHON, tests_dir, files, out / f"{release}-patched.xml")
    with tempfile.TemporaryDirectory(prefix="series-tests-pristine-", dir=out) as tmp:
        pristine_python = ScratchTorch(Path(tmp)).python
        pristine = run_pytest(pristine_python, tests_dir, files, out / f"{release}-pristine.xml")
    for f in files:
        p, q = patched[f], pristine[f]
        print(f"{f}: patched {p.passed} passed, {p.failed} failed; pristine {q.passed} passed, {q.failed} failed")
        if p.failed or not p.passed:
            problems.append(f"{f} does not pass on the patched torch {release}")
        if not q.failed:
            problems.append(f"{f} passes on the pristine torch {release}: it does not test its patch")
    return problems


def main() -> int:
    from scratch_torch import TORCH_RELEASE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", default=TORCH_RELEASE)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "series-tests")
    args = parser.parse_args()
    if args.release != TORCH_RELEASE:
        parser.error(f".venv holds torch {TORCH_RELEASE}; run: bash scripts/setup.sh --torch {args.release}")
    args.out.mkdir(parents=True, exist_ok=True)
    problems = check(args.release, args.out)
    for problem in problems:
        print("problem:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
