"""Git repositories for testing apply-source, the workspace and develop against real release files.

A "PyTorch checkout" here is a git repository laid out like the PyTorch source
tree holding the real torch wheel's own copies of the modules the series
touches plus torch/__init__.py, a version.txt and a small setup.py, committed
and tagged v<release>: exactly what the series meets in a real clone at that tag.

For 2.6.0 there is also the real thing: Debian's source package of PyTorch 2.6.0
(scripts/debian_source.py), the whole upstream tree, committed once and tagged
v2.6.0 (``debian_checkout``).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scratch_torch import REPO, TORCH_RELEASE, torch_wheel

sys.path.insert(0, str(REPO / "scripts"))
import debian_source  # noqa: E402  (scripts/debian_source.py, shared with scripts/upstream_suite.py)
from torch_overlay.cache_lock import cache_lock
from torch_overlay.pristine import from_wheel
from torch_overlay.series import load_series

RELEASE_DATE = "2024-10-29T17:00:00+00:00"
IDENTITY = ["-c", "user.name=torch-overlay tests", "-c", "user.email=tests@torch-overlay.invalid",
            # no detached ``gc --auto`` after a commit of the whole Debian tree: it kept writing
            # into the .partial folder while _make_release_repository renamed and removed it
            "-c", "gc.auto=0", "-c", "maintenance.auto=false"]
# A real setup.py: `develop` records that it ran and what it built from.
RECORDING_SETUP_PY = """\
import pathlib, sys
if sys.argv[1:] == ["develop"]:
    tree = pathlib.Path(__file__).resolve().parent
    traceback_py = (tree / "torch/fx/traceback.py").read_text()
    (tree / "develop-ran.txt").write_text(
        f"python={sys.executable}\\nannotate={'def annotate(' in traceback_py}\\n")
    print("setup.py develop: building torch in place")
else:
    sys.exit(f"unsupported command {sys.argv[1:]}")
"""
FAILING_SETUP_PY = """\
import sys
print("setup.py develop: compiler exploded")
sys.exit(3)
"""


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *IDENTITY, *args], capture_output=True, text=True,
                          env={**os.environ, **env} if env else None)
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout


@functools.cache
def wheel_reader():
    return from_wheel(torch_wheel())


def patches_copy(dest: Path) -> Path:
    """A copy of the repository's patches/ (tests point TORCH_OVERLAY_PATCHES at it)."""
    shutil.copytree(REPO / "patches", dest)
    return dest


def make_checkout(dest: Path, patches_root: Path, version_txt: str = TORCH_RELEASE + "\n",
                  setup_py: str = RECORDING_SETUP_PY, tag: str = "v" + TORCH_RELEASE) -> Path:
    """A PyTorch-like checkout at ``tag``, detached HEAD as after ``git checkout v2.5.1``."""
    series = load_series(TORCH_RELEASE, patches_root)
    read = wheel_reader()
    for path in [*series.touched, "torch/__init__.py"]:
        if path not in series.created:
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(read(path))
    (dest / "version.txt").write_text(version_txt)
    (dest / "setup.py").write_text(setup_py)
    (dest / ".gitignore").write_text("/build/\n*.so\n")
    git(dest, "init", "-q", "--initial-branch=main")
    git(dest, "add", "-A")
    # A fixed date: two checkouts made a second apart are still the same release commit.
    git(dest, "commit", "-q", "-m", "the release",
        env={"GIT_AUTHOR_DATE": RELEASE_DATE, "GIT_COMMITTER_DATE": RELEASE_DATE})
    git(dest, "tag", tag)
    git(dest, "checkout", "-q", "--detach", tag)
    return dest


def checkout_state(repo: Path) -> dict:
    """Everything apply-source must leave as it was: HEAD, branch, refs, index and work tree."""
    symbolic = subprocess.run(["git", "-C", str(repo), "symbolic-ref", "-q", "HEAD"], capture_output=True, text=True)
    files = {p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*")
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    return {
        "head": git(repo, "rev-parse", "HEAD").strip(),
        "branch": symbolic.stdout.strip() or None,
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "am_in_progress": (repo / ".git" / "rebase-apply").exists(),
        "files": files,
    }


def overlay_env(patches_root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    env["TORCH_OVERLAY_PATCHES"] = str(patches_root)
    return env


DEBIAN_RELEASE_DATE = "2025-01-29T17:00:00+00:00"  # PyTorch 2.6.0's release day (a fixed commit id)


def debian_release_repository() -> Path:
    """Debian's PyTorch 2.6.0 tree as a bare git repository, one commit tagged v2.6.0; made once under build/.

    Every file of the tarball is committed, also those upstream's .gitignore names (a clone at the tag
    has them tracked too)."""
    repo = debian_source.CACHE / f"repository-{debian_source.RELEASE}.git"
    with cache_lock(repo.with_name(repo.name + ".lock")):  # parallel test workers make it once
        if not (repo / "refs" / "tags" / f"v{debian_source.RELEASE}").is_file():
            _make_release_repository(repo)
    return repo


def _make_release_repository(repo: Path) -> None:
    tarball = debian_source.orig_tarball()
    partial = repo.with_name(repo.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tree = debian_source.unpack(tarball, partial / "unpacked")
    bare = ["--git-dir", str(partial / "bare"), "--work-tree", str(tree)]
    git(partial, "init", "-q", "--bare", "--initial-branch=main", str(partial / "bare"))
    git(partial, *bare, "add", "-A", "-f", ".")
    git(partial, *bare, "commit", "-q", "-m", f"PyTorch {debian_source.RELEASE} ({tarball.name})",
        env={"GIT_AUTHOR_DATE": DEBIAN_RELEASE_DATE, "GIT_COMMITTER_DATE": DEBIAN_RELEASE_DATE})
    git(partial, *bare, "tag", f"v{debian_source.RELEASE}")
    shutil.rmtree(repo, ignore_errors=True)
    (partial / "bare").rename(repo)
    shutil.rmtree(partial)


def debian_checkout(dest: Path) -> Path:
    """A clone of the Debian tree's repository, detached at v2.6.0 as after ``git checkout v2.6.0``."""
    git(REPO, "clone", "-q", "--no-checkout", str(debian_release_repository()), str(dest))
    git(dest, "checkout", "-q", "--detach", f"v{debian_source.RELEASE}")
    return dest
