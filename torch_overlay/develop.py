"""``torch-overlay develop CHECKOUT``: the installed torch runs a source checkout's Python files, with no build.

Working on a patch means editing PyTorch source and running it. A source build takes hours; PyTorch's own
``tools/nightly.py`` answers that by pairing a checkout with a prebuilt wheel. This does the same for the
files a series touches: the checkout holds the series as commits on top of the release (what
``apply-source`` or ``workspace`` make), the current Python has the wheel of that release installed, and
every Python file under ``torch/`` that those commits change becomes a symbolic link to the checkout's file.
An edit in the checkout is then what the next ``import torch`` runs; ``refresh`` turns the commits back into
the series.

The links go in through the same transaction as ``apply`` (staging, journal, import barrier, saved
originals, RECORD), so ``revert`` puts the release's files and RECORD back byte for byte, a crash is
finished or undone by the next command, and ``status`` says which checkout torch runs from. Nothing is
changed when the checkout is not one this torch can use: another release, no series commits, a commit
that changes what a link cannot carry (C++, a deleted file), or release files that differ from the
installed ones.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import OverlayError
from .install_steps import DEVELOP_KEY, install, recover_interrupted, revert_files, told_after
from .installation import DIFFERS, MISSING, NOT_IN_RELEASE, TorchInstallation
from .live_processes import guard_while_loaded
from .port import PRISTINE_TAG
from .record import record_hash
from .source_tree import CHECKOUT_MARKERS, CONFIG_BASE, CONFIG_VERSION, git, git_out, release_of_version_txt
from .transaction import exclusive_lock

UNCHANGED = "nothing was changed"


@dataclass
class SeriesCheckout:
    """A git repository holding a series as commits on top of a release."""

    top: Path
    version: str
    base: str                   # the ref the series commits start from (release tag, or "pristine")
    head: str                   # commit id
    branch: str | None
    patch_names: list[str]      # Patch-Name of each commit after base, in order
    linked: list[str]           # the Python files under torch/ those commits change or create
    elsewhere: list[str]        # files outside torch/ they change (upstream tests), not part of an installed torch

    def base_bytes(self, path: str) -> bytes | None:
        """The file at ``base`` (the release's own), None when the release has none there."""
        proc = git(self.top, "cat-file", "blob", f"{self.base}:{path}", check=False, binary=True)
        return proc.stdout if proc.returncode == 0 else None


def _config(top: Path, key: str) -> str:
    return git(top, "config", "--get", key, check=False).stdout.strip()


def _patch_name(message: str) -> str | None:
    for line in message.splitlines():
        key, colon, value = line.partition(": ")
        if colon and key == "Patch-Name" and value.strip():
            return value.strip()
    return None


# What develop links: files the wheel installs as they stand in the source tree and torch reads when it runs,
# so a link to the checkout's copy is all a change needs: Python files, and JSON data files such as Dynamo's
# graph_break_registry.json (a series from 2.10 on adds graph break types to it). Anything else under torch/
# (C++ sources, code-generation templates) reaches the wheel only through a build.
LINKED_SUFFIXES = (".py", ".json")


def inspect_series_checkout(checkout: Path) -> SeriesCheckout:
    """What develop needs from the checkout, and every refusal about it, before anything is changed."""
    if not checkout.is_dir():
        raise OverlayError(f"{checkout} is not a source checkout: no such folder", unchanged=UNCHANGED,
                           todo="pass the folder where 'torch-overlay apply-source' (or 'workspace') put the series")
    proc = git(checkout, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise OverlayError(f"{checkout} is not a source checkout: it is not inside a git work tree",
                           unchanged=UNCHANGED, todo="pass a PyTorch checkout after 'torch-overlay apply-source'")
    top = Path(proc.stdout.strip())
    version = _config(top, CONFIG_VERSION)
    if version:  # apply-source or workspace wrote it, with the commit the series starts from
        base = _config(top, CONFIG_BASE) or PRISTINE_TAG
    else:  # a PyTorch checkout where the series went in by hand (git am): the release tag
        if not all((top / m).is_file() for m in CHECKOUT_MARKERS):
            raise OverlayError(f"{top} is neither a PyTorch checkout ({', '.join(CHECKOUT_MARKERS)}) nor a "
                               "torch-overlay workspace", unchanged=UNCHANGED,
                               todo="pass a PyTorch checkout after 'torch-overlay apply-source'")
        version = release_of_version_txt((top / "version.txt").read_text(), top / "version.txt")
        base = f"v{version}"
    if git(top, "rev-parse", "-q", "--verify", f"{base}^{{commit}}", check=False).returncode:
        raise OverlayError(f"{top} has no {base} (the torch {version} release the series commits start from)",
                           unchanged=UNCHANGED, todo=f"git -C {top} fetch --tags, or run 'torch-overlay "
                                                     f"apply-source' on a checkout at v{version}")
    head = git_out(top, "rev-parse", "--verify", "HEAD")
    if git(top, "merge-base", "--is-ancestor", base, "HEAD", check=False).returncode:
        raise OverlayError(f"HEAD of {top} is not built on {base}, the torch {version} release",
                           unchanged=UNCHANGED, todo=f"check out the branch apply-source made (overlay/{version})")
    commits = git_out(top, "rev-list", "--reverse", f"{base}..HEAD").split()
    if not commits:
        raise OverlayError(f"{top} has no series commits: HEAD is {base} itself, the pristine torch {version}",
                           unchanged=UNCHANGED,
                           todo=f"put the series on it first: torch-overlay apply-source {top}")
    if git_out(top, "rev-list", "--merges", f"{base}..HEAD"):
        raise OverlayError(f"the commits after {base} in {top} include a merge; a series is linear",
                           unchanged=UNCHANGED, todo=f"rebase onto {base}")
    names = []
    for commit in commits:
        name = _patch_name(git_out(top, "log", "-1", "--format=%B", commit))
        if name is None:
            label = git_out(top, "log", "-1", "--format=%h \"%s\"", commit)
            raise OverlayError(f"commit {label} after {base} in {top} has no 'Patch-Name:' field: it is not a "
                               "commit of the series", unchanged=UNCHANGED,
                               todo="give it the DEP-3 fields (CONTRIBUTING.md), or check out the series branch")
        names.append(name)
    changes = [line.split("\t") for line in
               git_out(top, "diff", "--name-status", "--no-renames", base, "HEAD").splitlines()]
    deleted = [path for status, path in changes if status == "D"]
    not_python = [path for _, path in changes if path.startswith("torch/") and not path.endswith(LINKED_SUFFIXES)]
    if deleted or not_python:
        raise OverlayError(
            "develop links Python files (and JSON data files) only, and the series commits in "
            f"{top} also {'delete ' + ', '.join(deleted) if deleted else ''}"
            f"{' and ' if deleted and not_python else ''}"
            f"{'change ' + ', '.join(not_python) if not_python else ''}", unchanged=UNCHANGED,
            todo=f"build from source instead: torch-overlay apply-source --build (or python setup.py develop in {top})")
    branch = git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip() or None
    linked = [path for _, path in changes if path.startswith("torch/")]
    elsewhere = [path for _, path in changes if not path.startswith("torch/")]
    return SeriesCheckout(top, version, base, head, branch, names, linked, elsewhere)


def _pristine_hashes(inst: TorchInstallation, applied: dict | None, paths: list[str]) -> dict[str, str | None]:
    """The release's hash of each path as this installation knows it (None: the release has no such file),
    from the saved originals' record when an overlay is applied, else from RECORD."""
    entries = inst.record().entries()
    files = (applied or {}).get("files", {})
    return {p: files[p]["pristine"] if p in files else entries.get(p) for p in paths}


def _refuse_other_release(co: SeriesCheckout, inst: TorchInstallation, applied: dict | None) -> None:
    if co.version != inst.release:
        raise OverlayError(f"{co.top} is torch {co.version}, and this Python's torch is {inst.version}",
                           unchanged=UNCHANGED,
                           todo=f"run develop with the Python whose torch is {co.version}, or put the torch "
                                f"{inst.release} series on a checkout at v{inst.release} (torch-overlay apply-source)")
    expected = _pristine_hashes(inst, applied, co.linked)
    differ = []
    for path in co.linked:
        data = co.base_bytes(path)
        if (None if data is None else record_hash(data)) != expected[path]:
            differ.append(path)
    if differ:
        raise OverlayError(f"the files of {co.base} in {co.top} are not those of the installed torch "
                           f"{inst.version}: {', '.join(differ)} differ", unchanged=UNCHANGED,
                           todo=f"use a checkout of the unmodified release (tag v{inst.release})")


def _refuse_unfit_targets(inst: TorchInstallation, applied: dict | None, co: SeriesCheckout) -> None:
    """Targets not replaced by an applied overlay must be the release's files (or absent, for new ones)."""
    replaced = set((applied or {}).get("files", {}))
    problems = inst.file_problems([p for p in co.linked if p not in replaced])
    unfit = {p: why for p, why in problems.items()
             if why in (DIFFERS, MISSING) or (why == NOT_IN_RELEASE and os.path.lexists(inst.site / p))}
    if unfit:
        raise OverlayError("these torch files are not the release's: "
                           + ", ".join(f"{p} ({why})" for p, why in unfit.items()), unchanged=UNCHANGED,
                           todo=f"reinstall torch: {inst.reinstall_command}")


def develop_state(co: SeriesCheckout) -> dict:
    """The ``applied.json`` header of develop mode (beside the per-file entries every apply records)."""
    return {
        "torch_version": co.version,
        "series_digest": f"develop:{co.head}",  # never the series' digest: apply replaces develop mode
        "label": "develop",
        "patches": co.patch_names,
        "forced": False,
        DEVELOP_KEY: {"checkout": str(co.top), "base": co.base, "head": co.head, "branch": co.branch,
                      "links": {p: str(co.top / p) for p in co.linked}},
    }


def develop(checkout: Path, force: bool = False) -> str:
    co = inspect_series_checkout(checkout.resolve())
    inst = TorchInstallation.of_running_interpreter()
    with exclusive_lock(inst.dist_info):
        messages = [m for m in [recover_interrupted(inst)] if m]
        applied = inst.applied_state()
        _refuse_other_release(co, inst, applied)
        _refuse_unfit_targets(inst, applied, co)
        check = guard_while_loaded(inst.site / "torch", "torch-overlay develop", force)
        # the release's files first: the links replace them, and revert brings them back
        reverted = revert_files(inst, applied, check) if applied else None
        with told_after(reverted):
            shown = {p: (co.top / p).read_bytes() for p in co.linked}
            install(inst, develop_state(co), shown, links={p: co.top / p for p in co.linked}, barrier_check=check)
        messages += [reverted] if reverted else []
    where = co.branch and f"branch {co.branch}" or f"detached HEAD {co.head[:12]}"
    messages.append(
        f"develop: torch {inst.version} at {inst.site / 'torch'} now runs {len(co.linked)} Python file(s) of "
        f"{co.top} ({where}, {len(co.patch_names)} series commit(s) on {co.base}) through links: "
        + ", ".join(co.linked))
    if co.elsewhere:
        messages.append(f"not linked (not part of an installed torch; run them from {co.top}): "
                        + ", ".join(co.elsewhere))
    messages.append(f"edit there and import torch again; 'torch-overlay refresh {co.top}' writes the commits back to "
                    "the series, 'torch-overlay revert' puts the release's files back; run develop again after a "
                    "commit touches another file")
    return "\n".join(messages)
