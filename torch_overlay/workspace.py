"""The developer workspace: edit the series as git commits, then write it back.

``workspace`` makes a small git repository holding only the release files the
series touches (plus any ``--add`` paths): a first commit "pristine torch
<version>" tagged ``pristine``, then one ``git am`` commit per patch.  The
repository's config records which patches folder and version it belongs to
(``torch-overlay.patches``, ``torch-overlay.version``), so ``refresh`` needs
nothing but the folder.

``refresh`` turns every commit after ``pristine`` back into a format-patch
file named by the commit's ``Patch-Name`` field.  Author dates survive
``git am`` and git runs without the user's global configuration, so an
unedited workspace refreshes to the very same bytes.  If a patch does not
apply while the workspace is made (porting to another release), ``git am``
is left stopped at it for the developer to resolve and ``git am --continue``.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath

from .errors import OverlayError
from .installation import TorchInstallation, base_version
from .pristine import from_installation, from_wheel
from .series import parse_patch, load_series
from .source_tree import am_series, git, git_out, operation_in_progress
from .transaction import Transaction, exclusive_lock, recover

PRISTINE_TAG = "pristine"
CONFIG_PATCHES = "torch-overlay.patches"
CONFIG_VERSION = "torch-overlay.version"
PATCH_SUFFIX = ".patch"
DEFAULT_SERIES_COMMENT = '# Applied in order by torch-overlay; regenerate with "torch-overlay refresh".\n'


def _repository_path(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or str(p) != path.rstrip("/"):
        raise OverlayError(f"--add {path}: give a path inside the torch wheel such as torch/fx/proxy.py",
                           unchanged="nothing was created")
    return str(p)


def _pristine_reader(version: str, wheel: Path | None):
    if wheel is None:
        return from_installation(TorchInstallation.of_running_interpreter(), version)
    if not wheel.is_file():
        raise OverlayError(f"{wheel} does not exist", unchanged="nothing was created")
    parts = wheel.name.split("-")
    if len(parts) < 5 or parts[0] != "torch" or base_version(parts[1]) != version:
        raise OverlayError(f"{wheel.name} is not a torch {version} wheel", unchanged="nothing was created",
                           todo=f"pip download torch=={version} --no-deps -d build/wheels")
    return from_wheel(wheel)


def create_workspace(version: str, dir: Path, wheel: Path | None = None, extra: list[str] = ()) -> str:
    series = load_series(version)
    if dir.exists() and (not dir.is_dir() or any(dir.iterdir())):
        raise OverlayError(f"{dir} exists and is not an empty folder", unchanged=f"{dir} was not touched",
                           todo="pass a new folder")
    paths = [p for p in series.touched if p not in series.created]
    paths = list(dict.fromkeys(paths + [_repository_path(p) for p in extra]))
    read = _pristine_reader(version, wheel)
    files = {path: read(path) for path in paths}

    made_dir = not dir.exists()
    dir.mkdir(parents=True, exist_ok=True)
    try:
        git(dir, "init", "-q", "--initial-branch=main", isolated=True)
        for path, data in files.items():
            (dir / path).parent.mkdir(parents=True, exist_ok=True)
            (dir / path).write_bytes(data)
        git(dir, "add", "--", *paths, isolated=True)
        git(dir, "commit", "-q", "-m", f"pristine torch {version}", isolated=True)
        git(dir, "tag", PRISTINE_TAG, isolated=True)
        git(dir, "config", CONFIG_PATCHES, str(series.folder.resolve()), isolated=True)
        git(dir, "config", CONFIG_VERSION, version, isolated=True)
    except BaseException:
        if made_dir:
            shutil.rmtree(dir, ignore_errors=True)
        else:
            for child in dir.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise
    where = f"workspace {dir}: torch {version}, {len(paths)} pristine file(s) (tag {PRISTINE_TAG})"
    failure = am_series(dir, series, isolated=True)
    if failure:
        raise OverlayError(
            f"patch {failure.patch.name} does not apply to the pristine torch {version} files:\n{failure.output}",
            unchanged=f"{series.folder} was not changed; {where} is kept, with git am stopped at that patch",
            todo=f"resolve it in {dir} (edit the files, git add, git am --continue), then "
                 f"'torch-overlay refresh {dir}'")
    return (f"{where} and {len(series.patches)} patch commit(s) on top\n"
            f"edit and commit there, then 'torch-overlay refresh {dir}' rewrites {series.folder}")


def _commit_label(dir: Path, commit: str) -> str:
    return git_out(dir, "log", "-1", "--format=%h \"%s\"", commit, isolated=True)


def _format_patches(dir: Path) -> dict[str, bytes]:
    """{file name: format-patch bytes} of the commits after ``pristine``, in order."""
    merges = git_out(dir, "rev-list", "--merges", f"{PRISTINE_TAG}..HEAD", isolated=True)
    if merges:
        raise OverlayError(f"commit {_commit_label(dir, merges.split()[0])} in {dir} is a merge; a series is linear",
                           unchanged="the patches folder was not changed", todo="rebase onto pristine instead")
    commits = git_out(dir, "rev-list", "--reverse", f"{PRISTINE_TAG}..HEAD", isolated=True).split()
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="torch-overlay-refresh-") as tmp:
        for commit in commits:
            label = _commit_label(dir, commit)
            data = git(dir, "format-patch", "--zero-commit", "--no-signature", "-N", "--stdout", "-1", commit,
                       isolated=True, binary=True).stdout
            probe = Path(tmp, "probe.patch")
            probe.write_bytes(data)
            try:
                fields = parse_patch(probe).fields
            except OverlayError as e:
                raise OverlayError(f"commit {label}: {e.what.replace(str(probe), 'its patch')}",
                                   unchanged="the patches folder was not changed",
                                   todo="fix the commit message (git rebase -i pristine, reword), then refresh "
                                        "(see CONTRIBUTING.md for the DEP-3 fields)") from None
            name = fields.get("Patch-Name", "")
            if not name or "/" in name or name.startswith("."):
                raise OverlayError(f"commit {label} has no usable 'Patch-Name:' field (found {name!r})",
                                   unchanged="the patches folder was not changed",
                                   todo="add 'Patch-Name: <PR>-<slug>' to its message (git rebase -i pristine), "
                                        "then refresh")
            if name + PATCH_SUFFIX in out:
                raise OverlayError(f"commit {label} repeats Patch-Name {name}", unchanged="the patches folder "
                                   "was not changed", todo="give each commit its own Patch-Name")
            out[name + PATCH_SUFFIX] = data
    return out


def _series_text(old: str, names: list[str]) -> str:
    """The leading comment block of the old series file, then the names."""
    head = []
    for line in old.splitlines(keepends=True):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        head.append(line)
    comment = "".join(head) or DEFAULT_SERIES_COMMENT
    if not comment.endswith("\n"):
        comment += "\n"
    return comment + "".join(f"{n}\n" for n in names)


def refresh(dir: Path) -> str:
    if not (dir / ".git").exists():
        raise OverlayError(f"{dir} is not a torch-overlay workspace (no git repository)",
                           todo="create one with 'torch-overlay workspace VERSION DIR'")
    folder = git(dir, "config", "--get", CONFIG_PATCHES, check=False, isolated=True).stdout.strip()
    version = git(dir, "config", "--get", CONFIG_VERSION, check=False, isolated=True).stdout.strip()
    if not folder or not version:
        raise OverlayError(f"{dir} is not a torch-overlay workspace (its git config has no {CONFIG_PATCHES} / "
                           f"{CONFIG_VERSION})", todo="create one with 'torch-overlay workspace VERSION DIR'")
    folder_path = Path(folder)
    if not folder_path.is_dir():
        raise OverlayError(f"the patches folder {folder} this workspace refreshes into does not exist",
                           todo=f"restore it, or set it: git -C {dir} config {CONFIG_PATCHES} PATH")
    if git(dir, "rev-parse", "-q", "--verify", f"refs/tags/{PRISTINE_TAG}", check=False, isolated=True).returncode:
        raise OverlayError(f"{dir} has no tag {PRISTINE_TAG} (the release's files the commits apply to)",
                           unchanged="the patches folder was not changed",
                           todo=f"tag the pristine commit: git -C {dir} tag {PRISTINE_TAG} <commit>")
    busy = operation_in_progress(dir)
    if busy:
        raise OverlayError(f"{busy} is in progress in {dir}", unchanged="the patches folder was not changed",
                           todo="finish it (git am --continue) or abort it, then refresh")
    dirty = git(dir, "status", "--porcelain=v1", isolated=True).stdout.rstrip()
    if dirty:
        raise OverlayError(f"{dir} has uncommitted changes:\n{dirty}", unchanged="the patches folder was not changed",
                           todo="commit them (as a new patch or with git commit --amend / git rebase -i pristine) "
                                "or discard them, then refresh")
    patches = _format_patches(dir)

    with exclusive_lock(folder_path):
        recovered = recover(folder_path)
        series_file = folder_path / "series"
        old_series = series_file.read_text() if series_file.exists() else ""
        wanted = {**patches, "series": _series_text(old_series, list(patches)).encode()}
        txn = Transaction(folder_path, folder_path)
        written = []
        for name, data in wanted.items():
            if not (folder_path / name).is_file() or (folder_path / name).read_bytes() != data:
                txn.write(name, data)
                written.append(name)
        removed = sorted(p.name for p in folder_path.glob("*" + PATCH_SUFFIX) if p.name not in patches)
        for name in removed:
            txn.delete(name)
        if written or removed:
            txn.commit()
    lines = [recovered] if recovered else []
    lines.append(f"refreshed {folder_path} (torch {version}) from {dir}: {len(patches)} patch(es)")
    if written or removed:
        lines += [f"  written: {', '.join(written) or 'none'}", f"  removed: {', '.join(removed) or 'none'}"]
    else:
        lines.append("  already up to date: nothing written")
    return "\n".join(lines)
