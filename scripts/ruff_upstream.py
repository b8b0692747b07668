"""ruff at PyTorch's settings (scripts/ruff-upstream.toml) on what a release's series changes.

Upstream's own files are not all clean under today's ruff, so a changed file is judged by what the series adds:
ruff runs on the release's file and on the patched one, and a finding (rule and message) that only the patched
file has is the series'. One exception: an import of the release that the series leaves unused (F401) stays, as
the module's names must stay the release's (a patched torch differs from the release only by annotation tracing);
the upstream pull request drops it. The files a series adds (its tests under test/) must have no finding at all.
  usage: .venv/bin/python scripts/ruff_upstream.py [--release R]   (default 2.15.0; needs ruff: pip install ruff)
Exit status 0 when the series adds no finding, 1 otherwise (each one printed).
"""
from __future__ import annotations

import argparse
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


def ruff_findings(root: Path, files: list[str]) -> dict[str, Counter]:
    """File -> Counter of (rule, message) that ruff reports in it."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        sys.exit("ruff is not installed: .venv/bin/pip install ruff")
    proc = subprocess.run([ruff, "check", "--config", str(CONFIG), "--output-format", "json", "--no-cache",
                           *files], cwd=root, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"ruff failed ({proc.returncode}):\n{proc.stderr}")
    findings: dict[str, Counter] = {f: Counter() for f in files}
    for item in json.loads(proc.stdout or "[]"):
        path = Path(item["filename"]).resolve().relative_to(root.resolve()).as_posix()
        findings[path][(item["code"], item["message"])] += 1
    return findings


def _top_level_imports(source: str) -> set[str]:
    """Names a module binds with its top-level import statements."""
    import ast

    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _kept_release_import(finding: tuple[str, str], release_imports: set[str]) -> bool:
    """An unused-import finding (F401) on an import the release itself has."""
    code, message = finding
    name = message.split("`")[1].split(".")[0] if message.count("`") >= 2 else ""
    return code == "F401" and name in release_imports


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
    problems = []
    for path in changed + added + tests:
        extra = after[path] - before.get(path, Counter())
        if path in changed:
            release_imports = _top_level_imports(read(path).decode())
            extra = Counter({k: n for k, n in extra.items() if not _kept_release_import(k, release_imports)})
        problems += [f"{path}: {code} {message}" for (code, message), n in sorted(extra.items()) for _ in range(n)]
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
