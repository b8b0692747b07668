"""The developer workspace: edit the series as git commits, then write it back.

``workspace`` makes a small git repository holding only the release files the
series touches (plus any ``--add`` paths): a first commit "pristine torch
<version>" tagged ``pristine``, then one ``git am`` commit per patch.  The
repository's config records which patches folder and version it belongs to
(``torch-overlay.patches``, ``torch-overlay.version``), so ``refresh`` needs
nothing but the folder.

With ``--from OLD`` the workspace ports OLD's series to the release (see
port.py): OLD's pristine files and series come first, the release's pristine
files follow as a child commit tagged ``pristine``, and ``git rebase`` replays
the series onto them with a three-way merge, stopping at the first conflict
for the developer to resolve and ``git rebase --continue``.

``refresh`` turns every commit after ``pristine`` back into a format-patch
file named by the commit's ``Patch-Name`` field.  Author dates survive
``git am`` and git runs without the user's global configuration, so an
unedited workspace refreshes to the very same bytes.  A patch that applies
unchanged to the release is kept where it is already stored (another
release's folder, named in the series as ``../<release>/<name>.patch``);
only a patch whose change differs is written into the release's folder.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from .errors import OverlayError, check_output_location
from .installation import TorchInstallation, base_version
from .port import (MOVED_FILES, PRISTINE_TAG, applies_unchanged, base_tag, follow_moves, moved_paths, port_report,
                   render_report, series_branch)
from .pristine import MissingReleaseFile, from_installation, from_wheel
from .series import (PATCH_SUFFIX, SERIES_FILE, Series, default_patches_root, entry_for, entry_path, load_series,
                     parse_patch, series_entries, series_using, supported_versions)
from .source_tree import (CONFIG_BASE, CONFIG_PATCHES, CONFIG_VERSION, am_series, git, git_out,
                          operation_in_progress)
from .transaction import Transaction, exclusive_lock, recover

CONFIG_PORTED_FROM = "torch-overlay.ported-from"
DEFAULT_SERIES_COMMENT = '# Applied in order by torch-overlay; regenerate with "torch-overlay refresh".\n'


def _repository_path(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts or str(p) != path.rstrip("/"):
        raise OverlayError(f"--add {path}: give a path inside the torch wheel such as torch/fx/proxy.py",
                           unchanged="nothing was created")
    return str(p)


def _pristine_reader(version: str, wheel: Path | None, option: str = "--wheel"):
    if wheel is None:
        return from_installation(TorchInstallation.of_running_interpreter(), version)
    if not wheel.is_file():
        raise OverlayError(f"{wheel} does not exist", unchanged="nothing was created")
    parts = wheel.name.split("-")
    if len(parts) < 5 or parts[0] != "torch" or base_version(parts[1]) != version:
        raise OverlayError(f"{option} {wheel.name} is not a torch {version} wheel", unchanged="nothing was created",
                           todo=f"pip download torch=={version} --no-deps -d build/wheels")
    return from_wheel(wheel)


def _moved_series(series: Series, moves: dict[str, str], folder: Path) -> Series:
    """The series with its patches' paths moved to the new release's, as files in ``folder``."""
    patches = []
    for patch in series.patches:
        if any(path in moves for path in patch.touched):
            moved = folder / patch.name
            moved.write_bytes(follow_moves(patch.path.read_bytes(), moves))
            patch = replace(patch, path=moved)
        patches.append(patch)
    return replace(series, patches=patches)


def _new_release_files(version: str, old: str, wheel: Path | None, paths: list[str], extras: list[str],
                       root: Path) -> dict[str, bytes]:
    read = _pristine_reader(version, wheel)
    files = {}
    for path in paths:
        try:
            files[path] = read(path)
        except MissingReleaseFile as e:
            raise OverlayError(f"torch {version} has no {path}, a file the torch {old} series patches ({e.what})",
                               unchanged="nothing was created",
                               todo=f"if the file moved, add a line '<first release with the new path> {path} "
                                    f"<new path>' to {root / MOVED_FILES} (see CONTRIBUTING.md, 'Porting')") from None
    files.update({path: read(path) for path in extras})
    return files


def _commit_tree(dir: Path, files: dict[str, bytes], message: str) -> None:
    for path, data in files.items():
        (dir / path).parent.mkdir(parents=True, exist_ok=True)
        (dir / path).write_bytes(data)
    git(dir, "add", "-A", "--", *files, isolated=True)
    git(dir, "commit", "-q", "--allow-empty", "-m", message, isolated=True)


def create_workspace(version: str, dir: Path, wheel: Path | None = None, extra: list[str] = (),
                     from_version: str | None = None, from_wheel_path: Path | None = None) -> str:
    """A workspace for the ``version`` series; with ``from_version``, a port of that release's series."""
    root = default_patches_root()
    old = from_version or version
    porting = old != version
    if not porting and not (root / version / SERIES_FILE).is_file() and extra:
        # A release's first series: the workspace holds the files named with --add, no patches yet.
        series = Series(version, root / version, [])
        series.folder.mkdir(exist_ok=True)  # refresh writes the series there
    else:
        series = load_series(old, root)
    moves = moved_paths(root, old, version) if porting else {}
    if dir.exists() and (not dir.is_dir() or any(dir.iterdir())):
        raise OverlayError(f"{dir} exists and is not an empty folder", unchanged=f"{dir} was not touched",
                           todo="pass a new folder")
    check_output_location(dir, "the workspace", unchanged="nothing was created")
    extras = [_repository_path(p) for p in extra]
    targets = [p for p in series.touched if p not in series.created]
    changed_tests = [p for p in series.tests if p not in series.created]
    if changed_tests:
        patch = next(p for p in series.patches if changed_tests[0] in p.touched)
        raise OverlayError(f"patch {patch.name} of the torch {old} series changes {changed_tests[0]}, a file of "
                           "upstream's test tree, which a wheel or an installed torch does not hold",
                           unchanged="nothing was created",
                           todo="work on that patch in a PyTorch checkout ('torch-overlay apply-source', see "
                                "CONTRIBUTING.md), or have the patch add its test as a new file")
    read_old = _pristine_reader(old, from_wheel_path if porting else wheel, "--from-wheel" if porting else "--wheel")
    old_files = {moves.get(p, p): read_old(p) for p in targets}
    if porting:
        new_files = _new_release_files(version, old, wheel, list(old_files), extras, root)
    else:
        old_files.update({p: read_old(p) for p in extras})

    made_dir = not dir.exists()
    dir.mkdir(parents=True, exist_ok=True)
    try:
        git(dir, "init", "-q", "--initial-branch=main", isolated=True)
        (dir / ".git" / "info").mkdir(exist_ok=True)
        (dir / ".git" / "info" / "exclude").write_text("__pycache__/\n*.pyc\n")  # a py_compile check leaves them
        _commit_tree(dir, old_files, f"pristine torch {old}" + (f" at the paths of torch {version}" if moves else ""))
        git(dir, "tag", base_tag(old) if porting else PRISTINE_TAG, isolated=True)
        git(dir, "config", CONFIG_PATCHES, str(root.resolve() / version), isolated=True)
        git(dir, "config", CONFIG_VERSION, version, isolated=True)
        if porting:
            git(dir, "config", CONFIG_PORTED_FROM, old, isolated=True)
            with tempfile.TemporaryDirectory(prefix="torch-overlay-moved-") as tmp:
                failure = am_series(dir, _moved_series(series, moves, Path(tmp)), isolated=True)
            if failure:
                raise OverlayError(f"the torch {old} series does not apply to torch {old}'s own files (patch "
                                   f"{failure.patch.name}):\n{failure.output}", unchanged="nothing was created",
                                   todo=f"check the {old} series with 'torch-overlay workspace {old} DIR'")
    except BaseException:
        if made_dir:
            shutil.rmtree(dir, ignore_errors=True)
        else:
            for child in dir.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise
    if porting:
        return _port(dir, old, version, series, moves, new_files)

    where = f"workspace {dir}: torch {version}, {len(old_files)} pristine file(s) (tag {PRISTINE_TAG})"
    failure = am_series(dir, series, isolated=True)
    if failure:
        raise OverlayError(
            f"patch {failure.patch.name} does not apply to the pristine torch {version} files:\n{failure.output}",
            unchanged=f"{series.folder} was not changed; {where} is kept, with git am stopped at that patch",
            todo=f"resolve it in {dir} (edit the files, git add, git am --continue), then "
                 f"'torch-overlay refresh {dir}'")
    return (f"{where} and {len(series.patches)} patch commit(s) on top\n"
            f"edit and commit there, then 'torch-overlay refresh {dir}' rewrites {series.folder}")


def _port(dir: Path, old: str, version: str, series: Series, moves: dict[str, str],
          new_files: dict[str, bytes]) -> str:
    """Put torch ``version``'s files after torch ``old``'s and rebase the series onto them."""
    git(dir, "branch", series_branch(old), isolated=True)
    git(dir, "checkout", "-q", "--detach", base_tag(old), isolated=True)
    _commit_tree(dir, new_files, f"pristine torch {version}")
    git(dir, "tag", PRISTINE_TAG, isolated=True)
    git(dir, "checkout", "-q", "main", isolated=True)
    rebase = git(dir, "rebase", "--onto", PRISTINE_TAG, base_tag(old), "main", check=False, isolated=True)
    report = render_report(old, version, port_report(dir, old, moves))
    where = (f"workspace {dir}: the torch {old} series ({len(series.patches)} patches) ported to torch {version} "
             f"(tags {base_tag(old)}, {PRISTINE_TAG}; branch {series_branch(old)})")
    if rebase.returncode:
        if not operation_in_progress(dir):
            raise OverlayError(f"'git rebase' failed in {dir}:\n{(rebase.stdout + rebase.stderr).strip()}")
        raise OverlayError(
            f"{where}: git rebase stopped at a conflict\n{report}",
            unchanged=f"the patches folder was not changed; {dir} is kept, with the conflict markers in the files",
            todo=f"in {dir}: resolve the conflicts (edit, git add), 'git rebase --continue', again at each stop; "
                 f"then 'torch-overlay refresh {dir}'")
    return (f"{where}\n{report}\n"
            f"check the result (a clean merge can still fail at run time), then 'torch-overlay refresh {dir}' "
            f"writes {series.folder.parent / version}")


def _commit_label(dir: Path, commit: str) -> str:
    return git_out(dir, "log", "-1", "--format=%h \"%s\"", commit, isolated=True)


def _format_patches(dir: Path, base: str) -> list[tuple[str, bytes, str]]:
    """(file name, format-patch bytes, commit) of the commits after ``base``, in order."""
    merges = git_out(dir, "rev-list", "--merges", f"{base}..HEAD", isolated=True)
    if merges:
        raise OverlayError(f"commit {_commit_label(dir, merges.split()[0])} in {dir} is a merge; a series is linear",
                           unchanged="the patches folder was not changed", todo=f"rebase onto {base} instead")
    commits = git_out(dir, "rev-list", "--reverse", f"{base}..HEAD", isolated=True).split()
    out: list[tuple[str, bytes, str]] = []
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
            if any(n == name + PATCH_SUFFIX for n, _, _ in out):
                raise OverlayError(f"commit {label} repeats Patch-Name {name}", unchanged="the patches folder "
                                   "was not changed", todo="give each commit its own Patch-Name")
            out.append((name + PATCH_SUFFIX, data, commit))
    return out


def _series_text(old: str, entries: list[str]) -> str:
    """The leading comment block of the old series file, then the entries."""
    head = []
    for line in old.splitlines(keepends=True):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        head.append(line)
    comment = "".join(head) or DEFAULT_SERIES_COMMENT
    if not comment.endswith("\n"):
        comment += "\n"
    return comment + "".join(f"{e}\n" for e in entries)


def _series_files(folder: Path) -> dict[str, Path]:
    """{patch file name: the file} of the series in ``folder`` (none when it has no series yet)."""
    series_file = folder / SERIES_FILE
    if not series_file.is_file():
        return {}
    return {entry_path(folder, e).name: entry_path(folder, e) for e in series_entries(series_file)}


def _same_change(dir: Path, stored: Path, data: bytes, commit: str) -> bool:
    """Is the patch file ``stored`` (kept for another release) this commit: the same message,
    and a diff that turns this release's files into the commit's?"""
    kept = stored.read_bytes()
    return kept.partition(b"\n---\n")[0] == data.partition(b"\n---\n")[0] and applies_unchanged(dir, kept, commit)


def _series_entry(dir: Path, folder: Path, name: str, data: bytes, commit: str, candidates: list[Path]) -> str:
    """Where the commit's patch is stored: the first candidate that is it, else its own file in ``folder``."""
    for stored in dict.fromkeys(candidates):
        in_folder = stored.parent.resolve() == folder.resolve()
        if stored.read_bytes() == data or (not in_folder and _same_change(dir, stored, data, commit)):
            return entry_for(folder, stored)
    return name


def refresh(dir: Path) -> str:
    if not (dir / ".git").exists():
        raise OverlayError(f"{dir} is not a torch-overlay workspace (no git repository)",
                           todo="create one with 'torch-overlay workspace VERSION DIR'")
    folder = git(dir, "config", "--get", CONFIG_PATCHES, check=False, isolated=True).stdout.strip()
    version = git(dir, "config", "--get", CONFIG_VERSION, check=False, isolated=True).stdout.strip()
    old = git(dir, "config", "--get", CONFIG_PORTED_FROM, check=False, isolated=True).stdout.strip()
    if not folder or not version:
        raise OverlayError(f"{dir} is not a torch-overlay workspace (its git config has no {CONFIG_PATCHES} / "
                           f"{CONFIG_VERSION})", todo="create one with 'torch-overlay workspace VERSION DIR'")
    folder_path = Path(folder)
    root = folder_path.parent
    if not folder_path.is_dir() and not (old and root.is_dir()):
        raise OverlayError(f"the patches folder {folder} this workspace refreshes into does not exist",
                           todo=f"restore it, or set it: git -C {dir} config {CONFIG_PATCHES} PATH")
    # A workspace's series starts at its tag "pristine"; a checkout's after apply-source at the release tag.
    base = git(dir, "config", "--get", CONFIG_BASE, check=False, isolated=True).stdout.strip() or PRISTINE_TAG
    if git(dir, "rev-parse", "-q", "--verify", f"refs/tags/{base}", check=False, isolated=True).returncode:
        raise OverlayError(f"{dir} has no tag {base} (the release's files the commits apply to)",
                           unchanged="the patches folder was not changed",
                           todo=f"tag the release's commit: git -C {dir} tag {base} <commit>")
    busy = operation_in_progress(dir)
    if busy:
        raise OverlayError(f"{busy} is in progress in {dir}", unchanged="the patches folder was not changed",
                           todo="finish it (git am --continue / git rebase --continue) or abort it, then refresh")
    if git(dir, "merge-base", "--is-ancestor", base, "HEAD", check=False, isolated=True).returncode:
        raise OverlayError(f"HEAD of {dir} is not built on the tag {base} (an aborted port rebase leaves "
                           f"HEAD on the old release's series)", unchanged="the patches folder was not changed",
                           todo=f"check out the branch built on {base}, or make the workspace again")
    dirty = git(dir, "status", "--porcelain=v1", isolated=True).stdout.rstrip()
    if dirty:
        raise OverlayError(f"{dir} has uncommitted changes:\n{dirty}", unchanged="the patches folder was not changed",
                           todo="commit them (as a new patch or with git commit --amend / git rebase -i pristine) "
                                "or discard them, then refresh")
    patches = _format_patches(dir, base)
    lines = [render_report(old, version, port_report(dir, old, moved_paths(root, old, version)))] if old else []

    folder_path.mkdir(exist_ok=True)
    with exclusive_lock(folder_path):
        recovered = recover(folder_path)
        current, ported = _series_files(folder_path), _series_files(root / old) if old else {}
        # Any other release may keep the same patch (stored once): looked at oldest release first.
        others = [_series_files(root / v) for v in supported_versions(root) if v not in (version, old)]
        entries = [_series_entry(dir, folder_path, name, data, commit,
                                 [p for p in (current.get(name), ported.get(name), *(o.get(name) for o in others))
                                  if p and p.is_file()])
                   for name, data, commit in patches]
        series_file = folder_path / SERIES_FILE
        old_series = series_file.read_text() if series_file.exists() else ""
        wanted = {name: data for (name, data, _), entry in zip(patches, entries) if entry == name}
        wanted[SERIES_FILE] = _series_text(old_series, entries).encode()
        txn = Transaction(folder_path, folder_path)
        written = []
        for name, data in wanted.items():
            if not (folder_path / name).is_file() or (folder_path / name).read_bytes() != data:
                txn.write(name, data)
                written.append(name)
        removed, kept = [], []
        for path in sorted(folder_path.glob("*" + PATCH_SUFFIX)):
            if path.name not in wanted:
                users = [v for v in series_using(root, path) if v != version]
                (kept.append(f"{path.name} (the torch {', '.join(users)} series use it)") if users
                 else removed.append(path.name))
        for name in removed:
            txn.delete(name)
        if written or removed:
            txn.commit()
    shared = [f"{name} (also applied by the torch {', '.join(users)} series: test those releases too)"
              for name in written if name != SERIES_FILE
              for users in [[v for v in series_using(root, folder_path / name) if v != version]] if users]
    if recovered:
        lines.insert(0, recovered)
    stored_once = [e for e in entries if "/" in e]
    lines.append(f"refreshed {folder_path} (torch {version}) from {dir}: {len(patches)} patch(es)"
                 + (f", {len(stored_once)} of them stored once in another release's folder" if stored_once else ""))
    if written or removed:
        lines += [f"  written: {', '.join(written) or 'none'}", f"  removed: {', '.join(removed) or 'none'}"]
    else:
        lines.append("  already up to date: nothing written")
    lines += [f"  kept: {k}" for k in kept] + [f"  shared: {s}" for s in shared]
    return "\n".join(lines)
