"""ruff at PyTorch's settings (scripts/ruff-upstream.toml) on what a release's series changes.

Upstream's own files are not all clean under today's ruff, so a changed file is judged by what the series adds:
ruff runs on the release's file and on the patched one, and a finding is the series' when it is on a line the
series adds or changes, or when it is new to the file (an import of the release that the series leaves unused,
F401, is reported on the release's line: the pull request drops the import). Line length is upstream's 88
columns (its ruff `line-length`, the width its formatter holds torch/ code to), for the lines the series adds;
the release's own longer lines are left alone. The files a series adds (its tests under test/) must have no
finding at all.

`ruff format` (upstream's PYFMT lint) is checked as upstream applies it: a file the series adds must come out of
the formatter unchanged, and so must a changed file whose release version does (a release file the formatter
would rewrite is one upstream does not format; it is left alone). A line lint accepts can still be one the
formatter joins or splits: a signature that fits in 88 columns, a missing blank line before `if __name__`.
  usage: .venv/bin/python scripts/ruff_upstream.py [--release R]   (default 2.15.0; needs ruff: pip install ruff)
Exit status 0 when the series adds no finding, 1 otherwise (each one printed, with its line).
"""
from __future__ import annotations

import argparse
import difflib
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from torch_overlay.series import load_series  # noqa: E402

CONFIG = REPO / "scripts" / "ruff-upstream.toml"


Finding = tuple[int, str, str]  # (line, rule, message)


def ruff_findings(root: Path, files: list[str]) -> dict[str, list[Finding]]:
    """File -> the findings ruff reports in it."""
    proc = subprocess.run([ruff_binary(), "check", "--config", str(CONFIG), "--output-format", "json", "--no-cache",
                           *files], cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"ruff failed ({proc.returncode}):\n{proc.stderr}")
    findings: dict[str, list[Finding]] = {f: [] for f in files}
    for item in json.loads(proc.stdout or "[]"):
        path = Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix()
        findings[path].append((item["location"]["row"], item["code"], item["message"]))
    return findings


def ruff_binary() -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        sys.exit("ruff is not installed: .venv/bin/pip install ruff")
    return ruff


def format_rewrites(root: Path, files: list[str]) -> dict[str, str]:
    """File -> the diff ``ruff format`` would make to it, for the files it would rewrite."""
    if not files:
        return {}
    proc = subprocess.run([ruff_binary(), "format", "--config", str(CONFIG), "--no-cache", "--diff", *files],
                          cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"ruff format failed ({proc.returncode}):\n{proc.stderr}")
    rewrites: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("--- "):
            current = Path(line[4:].split("\t")[0]).as_posix()
            current = next((f for f in files if current.endswith(f)), current)
        if current is not None:
            rewrites.setdefault(current, []).append(line)
    return {path: "\n".join(lines) for path, lines in rewrites.items()}


def added_lines(before: str, after: str) -> set[int]:
    """The 1-based numbers of the lines of ``after`` that are not lines of ``before`` (added or changed)."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return {j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert")
            for j in range(j1, j2)}


def series_findings(before: list[Finding], after: list[Finding], added: set[int]) -> list[Finding]:
    """The findings of the patched file that are the series': on a line it adds, or new to the file."""
    old = Counter((code, message) for _, code, message in before)
    mine = []
    for line, code, message in sorted(after):
        if line in added:
            mine.append((line, code, message))
        elif old[(code, message)]:
            old[(code, message)] -= 1
        else:
            mine.append((line, code, message))
    return mine


def tree_of(dest: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(data)
    return dest


def new_findings(release: str, wheel: Path) -> list[str]:
    from torch_overlay.build import build_patched
    from torch_overlay.pristine import from_wheel

    series = load_series(release)
    read = from_wheel(wheel)
    patched = build_patched(series, read)
    changed = [p for p in patched if p.endswith(".py") and p not in series.created]
    added = [p for p in patched if p.endswith(".py") and p in series.created]
    with tempfile.TemporaryDirectory(prefix="ruff-upstream-") as tmp:
        before = ruff_findings(tree_of(Path(tmp) / "pristine", {p: read(p) for p in changed}), changed)
        after_root = tree_of(Path(tmp) / "patched", patched)
        subprocess.run(["git", "init", "-q", str(after_root)], check=True)
        for patch in series.patches:  # the tests the patches add (build_patched leaves test/ out)
            subprocess.run(["git", "apply", "--include=test/*", str(patch.path)], cwd=after_root, check=True)
        tests = sorted(series.tests)
        after = ruff_findings(after_root, changed + added + tests)
        formatted_by_upstream = set(changed) - set(format_rewrites(Path(tmp) / "pristine", changed))
        rewrites = format_rewrites(after_root, sorted(formatted_by_upstream) + added + tests)
    problems = []
    for path in changed + added + tests:
        if path in changed:
            lines = added_lines(read(path).decode(), patched[path].decode())
            found = series_findings(before[path], after[path], lines)
        else:
            found = sorted(after[path])
        problems += [f"{path}:{line}: {code} {message}" for line, code, message in found]
    for path, diff in sorted(rewrites.items()):
        problems.append(f"{path}: ruff format would rewrite it:\n{diff}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", default="2.15.0")
    parser.add_argument("--wheel", type=Path, help="the release's wheel (default: fetched into build/wheels)")
    args = parser.parse_args()
    if args.wheel is None:
        from torch_overlay.pristine import fetch_wheel

        args.wheel = fetch_wheel(args.release, REPO / "build" / "wheels")
    problems = new_findings(args.release, args.wheel)
    for problem in problems:
        print(problem)
    print(f"ruff at upstream's settings, torch {args.release} series: {len(problems)} new finding(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
