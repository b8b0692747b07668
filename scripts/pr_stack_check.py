"""Every pull request of a release's series checked with exactly the patches it sits on, on the pristine release.

Each local patch of the series is a pull request upstream: it applies alone to the release, or on the patches
its `Stack:` header names (torch_overlay/stacks.py). For each one this script checks, on the release's own
files (read from its wheel, verified against the wheel's RECORD):

  (a) its stack and then the patch apply (torch/ and test/ hunks alike);
  (b) the tests the patch adds under test/ pass on the release with its stack and the patch;
  (c) they fail on the release with its stack alone: they test what the patch changes;

and (d) every test the series adds passes on .venv's torch, patched with the whole series (a later patch must
not break an earlier one's test).

A scratch torch (test/overlay/scratch_torch.py: hard links to .venv's torch, private copies of the files the
series touches; one per worker, made once) serves one combination after the other: the files of a combination
are written into it, its bytecode of those files dropped, and one pytest process runs every test file that
combination is asked about (importing torch dominates the cost). Pull requests whose stacks overlap share
combinations: a stack's top patch with its stack is the next pull request's stack alone, so a series of N pull
requests takes about N + 2 processes.
  usage: .venv/bin/python scripts/pr_stack_check.py [--release R] [--only NAME ...] [--workers N]
         (default: the release .venv holds; --only: those pull requests, and no whole-series run)
Exit status 0 when every check holds, 1 otherwise (each file's outcome is printed), 2 on a bad Stack line.
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "test" / "overlay"))

from torch_overlay.build import build_patched  # noqa: E402
from torch_overlay.errors import OverlayError  # noqa: E402
from torch_overlay.series import TEST_TREE, Patch, Series, load_series  # noqa: E402
from torch_overlay.stacks import patch_name, stack_of  # noqa: E402

PATCHED_PYTHON = REPO / ".venv" / "bin" / "python"
SERIES_RUN = "(whole series)"


def is_pull_request(patch: Patch) -> bool:
    """The series' own fixes, each offered upstream as a pull request (backports are upstream's already)."""
    return patch_name(patch).startswith("local-")


def test_files(patch: Patch) -> list[str]:
    return [c for c in patch.created if c.startswith(TEST_TREE)]


@dataclass
class Outcome:
    passed: int = 0
    failed: int = 0  # failures and errors (a collection error counts: the file cannot run)


@dataclass
class Run:
    """One combination of patches on the release, and the test files to run with it."""
    patches: tuple[str, ...]
    files: list[str] = field(default_factory=list)  # paths under the run's test folder


def write_tests(patches: list[Patch], dest: Path) -> str:
    """Write the test files ``patches`` add, applied in order onto an empty tree, into ``dest``; '' or why not."""
    dest.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    try:
        for patch in patches:
            proc = subprocess.run(["git", "apply", f"--include={TEST_TREE}*", str(patch.path)], cwd=dest,
                                  capture_output=True, text=True)
            if proc.returncode:
                return f"the test/ hunks of {patch.name} do not apply: {proc.stderr.strip()}"
        return ""
    finally:
        shutil.rmtree(dest / ".git")


def patched_files(series: Series, patches: list[Patch], read) -> dict[str, bytes]:
    """The torch/ files of the release with ``patches`` applied in order (OverlayError naming the one that fails)."""
    return build_patched(Series(series.version, series.folder, patches), read)


def run_pytest(python: Path, root: Path, files: list[str], report: Path) -> dict[str, Outcome]:
    """Each file's outcome under ``python`` (one pytest process, rooted at ``root``)."""
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                    "-c", "/dev/null", f"--junitxml={report}", *files], cwd=root, capture_output=True, text=True,
                   env=_env())
    outcomes = {f: Outcome() for f in files}
    if not report.is_file():
        return outcomes
    for case in ET.parse(report).iter("testcase"):
        classname = case.get("classname", "")
        file = next((f for f in files if f"{classname}.".startswith(f"{f[:-len('.py')].replace('/', '.')}.")), None)
        if file is None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[file].failed += 1
        elif case.find("skipped") is None:
            outcomes[file].passed += 1
    return outcomes


def _env() -> dict[str, str]:
    # No bytecode written: the scratch's files change between runs, possibly within one second at one size.
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")},
            "PYTHONDONTWRITEBYTECODE": "1"}


class ScratchRelease:
    """The release's torch in a scratch installation, with any combination of the series' patches written in."""

    def __init__(self, root: Path, series: Series, read):
        from scratch_torch import ScratchTorch

        self.scratch = ScratchTorch(root)
        self.series, self.read = series, read
        self.paths = series.installed

    @property
    def python(self) -> Path:
        return self.scratch.python

    def set_files(self, files: dict[str, bytes]) -> None:
        """The release's files, with ``files`` (patched bytes by path) in place of theirs."""
        site = self.scratch.site
        for path in self.paths:
            target = site / path
            cache = target.parent / "__pycache__"
            for pyc in cache.glob(f"{target.stem}.*.pyc") if cache.is_dir() else ():
                pyc.unlink()  # the scratch's own folder entry; .venv's file is untouched
            data = files.get(path)
            if data is None and path in self.series.created:
                target.unlink(missing_ok=True)
                continue
            if data is None:
                data = self.read(path)
            target.unlink(missing_ok=True)  # never write through a hard link
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def plan(series: Series, only: list[str]) -> tuple[dict[tuple[str, ...], Run], list[tuple[Patch, list[Patch]]]]:
    """The runs (one per combination of patches) and each pull request with its stack."""
    prs = [(p, stack_of(series, p)) for p in series.patches if is_pull_request(p)]
    if only:
        unknown = sorted(set(only) - {patch_name(p) for p, _ in prs})
        if unknown:
            raise OverlayError(f"--only names {', '.join(unknown)}, not a pull request of the torch "
                               f"{series.version} series", todo="name local patches of the series")
        prs = [(p, s) for p, s in prs if patch_name(p) in only]
    runs: dict[tuple[str, ...], Run] = {}
    for patch, stack in prs:
        below = tuple(patch_name(p) for p in stack)
        runs.setdefault(below, Run(below))
        runs.setdefault((*below, patch_name(patch)), Run((*below, patch_name(patch))))
    return runs, prs


def check(release: str, out: Path, read, only: list[str], workers: int = 1) -> list[str]:
    """Problems found (empty when every check holds)."""
    series = load_series(release)
    by_name = {patch_name(p): p for p in series.patches}
    runs, prs = plan(series, only)
    problems = [f"{patch_name(p)} adds no test under {TEST_TREE}" for p, _ in prs if not test_files(p)]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    # (a): each pull request's stack and itself apply; its tests are written from exactly those patches.
    applies: dict[tuple[str, ...], dict[str, bytes]] = {}
    checked: list[tuple[Patch, list[Patch], str]] = []  # (patch, stack, its tests' folder)
    for patch, stack in prs:
        name = patch_name(patch)
        with_it = (*(patch_name(p) for p in stack), name)
        for combo in (with_it[:-1], with_it):
            if combo not in applies:
                try:
                    applies[combo] = patched_files(series, [by_name[n] for n in combo], read)
                except OverlayError as e:
                    applies[combo] = None
                    problems.append(f"{name}: on torch {release}{_on(stack)}: {e.what}")
        why = write_tests([*stack, patch], out / "tests" / name)
        if why:
            problems.append(f"{name}: {why}")
        if applies[with_it[:-1]] is None or applies[with_it] is None or why:
            continue
        checked.append((patch, stack, name))
        for f in test_files(patch):
            runs[with_it].files.append(f"{name}/{f}")
            runs[with_it[:-1]].files.append(f"{name}/{f}")

    # (b), (c): one pytest process per combination, on a scratch release (one per worker).
    tests_root = out / "tests"
    outcomes: dict[tuple[tuple[str, ...], str], Outcome] = {}
    todo = [(i, combo, run) for i, (combo, run) in enumerate(sorted(runs.items(), key=lambda kv: len(kv[0])))
            if run.files]
    with tempfile.TemporaryDirectory(prefix="pr-stack-scratch-", dir=out) as tmp:
        free: queue.Queue[ScratchRelease] = queue.Queue()
        for w in range(max(1, min(workers, len(todo)))):
            free.put(ScratchRelease(Path(tmp) / str(w), series, read))

        def one(i: int, combo: tuple[str, ...], run: Run) -> None:
            scratch = free.get()
            try:
                start = time.monotonic()
                scratch.set_files(applies[combo])
                result = run_pytest(scratch.python, tests_root, run.files, out / f"run-{i}.xml")
            finally:
                free.put(scratch)
            outcomes.update({(combo, f): o for f, o in result.items()})
            label = " + ".join(combo) or "pristine"
            print(f"run {label}: {len(run.files)} file(s), {time.monotonic() - start:.0f} s", flush=True)

        with ThreadPoolExecutor(max_workers=free.qsize()) as pool:
            for future in [pool.submit(one, *job) for job in todo]:
                future.result()
    for patch, stack, folder in checked:
        name = patch_name(patch)
        with_it = (*(patch_name(p) for p in stack), name)
        for f in test_files(patch):
            p, q = outcomes[(with_it, f"{folder}/{f}")], outcomes[(with_it[:-1], f"{folder}/{f}")]
            print(f"{name}{_on(stack)}: {f}: with it {p.passed} passed, {p.failed} failed; "
                  f"without it {q.passed} passed, {q.failed} failed")
            if p.failed or not p.passed:
                problems.append(f"{name}: {f} does not pass on torch {release}{_on(stack)} with the patch")
            if not q.failed:
                problems.append(f"{name}: {f} passes on torch {release}{_on(stack)} without the patch: it does not "
                                "test what the patch changes")

    # (d): every test the series adds, on .venv's torch patched with the whole series.
    if not only:
        series_tests = out / "series"
        why = write_tests(series.patches, series_tests)
        files = sorted(series.tests)
        if why:
            problems.append(f"the whole series: {why}")
        elif files:
            start = time.monotonic()
            result = run_pytest(PATCHED_PYTHON, series_tests, files, out / "series.xml")
            print(f"run {SERIES_RUN} on .venv: {len(files)} file(s), {time.monotonic() - start:.0f} s")
            for f, o in result.items():
                if o.failed or not o.passed:
                    problems.append(f"{f} does not pass on .venv's torch {release}, patched with the whole series "
                                    f"({o.passed} passed, {o.failed} failed)")
    return problems


def _on(stack: list[Patch]) -> str:
    return f" + {' + '.join(patch_name(p) for p in stack)}" if stack else ""


def main() -> int:
    from scratch_torch import TORCH_RELEASE

    from torch_overlay.pristine import fetch_wheel, from_wheel

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", default=TORCH_RELEASE)
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="check these pull requests only")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="pytest processes at a time, each on its own scratch torch (default: one per core, "
                             "at most 4)")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "pr-stack-check")
    args = parser.parse_args()
    if args.release != TORCH_RELEASE:
        parser.error(f".venv holds torch {TORCH_RELEASE}; run: bash scripts/setup.sh --torch {args.release}")
    start = time.monotonic()
    try:
        read = from_wheel(fetch_wheel(args.release, REPO / "build" / "wheels"))
        problems = check(args.release, args.out / args.release, read, args.only, args.workers)
    except OverlayError as e:
        print(e.render(), file=sys.stderr)
        return 2
    for problem in problems:
        print("problem:", problem)
    print(f"pull requests of the torch {args.release} series, each with its stack: {len(problems)} problem(s), "
          f"{time.monotonic() - start:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
