"""status / apply / revert on the torch installation of the running interpreter."""
from __future__ import annotations

from dataclasses import dataclass

from .behaviours import behaviours
from .build import build_patched
from .errors import OverlayError
from .install_steps import (DEVELOP_KEY, BarrierLeft, install, link_problems, recover_interrupted, revert_files,
                            saved_original, state_files, told_after)
from .installation import DIFFERS, MISSING, NOT_IN_RELEASE, TorchInstallation
from .live_processes import guard_while_loaded
from .record import Record
from .series import Series, load_series
from .transaction import exclusive_lock, failpoint

# status exit codes (documented in --help and the README)
STATUS_CONSISTENT = 0   # pristine, or fully patched by the current series of a known release
STATUS_NEEDS_ACTION = 1  # the output names the command to run
# 2: usage errors and refusals, as for every command


@dataclass
class Status:
    installation: TorchInstallation
    version: str | None       # None when torch's METADATA does not say (a problem says why)
    series: Series | None
    applied: dict | None
    modified: dict[str, str]  # series targets not as RECORD lists them -> what is wrong
    recovered: str | None     # what recovery did, if anything
    problems: list[OverlayError]  # what status could not deal with (the other commands refuse on these)

    @property
    def develop(self) -> dict | None:
        """Where the links of develop mode point (see develop.py), None when torch is not in develop mode."""
        return (self.applied or {}).get(DEVELOP_KEY)

    @property
    def outdated(self) -> bool:
        """An applied overlay that is not the current series of this release (develop mode is never)."""
        return bool(self.applied) and not self.develop and (
            self.series is None or self.applied["series_digest"] != self.series.digest)

    @property
    def exit_code(self) -> int:
        needs_action = self.problems or self.modified or self.outdated
        return STATUS_NEEDS_ACTION if needs_action else STATUS_CONSISTENT

    def render(self) -> str:
        inst = self.installation
        lines = [f"torch {self.version or '(unknown version)'} at {inst.site / 'torch'}"]
        if self.recovered:
            lines.append(f"recovered: {self.recovered}")
        for problem in self.problems:
            lines.append(f"problem: {problem.what}" + (f" ({problem.unchanged})" if problem.unchanged else ""))
            if problem.todo:
                lines.append(f"  to do: {problem.todo}")
        if self.series is None:
            lines.append("series: none for this release")
        else:
            lines.append(f"series: patches/{self.series.version} ({len(self.series.patches)} patches, {self.series.label})")
            lines += self._behaviour_lines()
        if self.develop:
            dev = self.develop
            lines.append(f"applied: develop mode: {len(dev['links'])} Python file(s) of torch are links to "
                         f"{dev['checkout']} ({dev['branch'] and 'branch ' + dev['branch'] or 'detached HEAD'}; "
                         f"commits on {dev['base']} when develop ran: {', '.join(self.applied['patches'])})")
            lines.append("  edits there are what 'import torch' runs; 'torch-overlay revert' puts the release's files "
                         "back, 'torch-overlay apply' the series")
        elif self.applied:
            lines.append("applied: " + ", ".join(self.applied["patches"]) + self._outdated_advice())
        elif not self.problems:
            lines.append("applied: none")
        if self.modified:
            lines.append("files differing from RECORD: " + ", ".join(
                p if why == DIFFERS else f"{p} ({why})" for p, why in self.modified.items()))
            if any(isinstance(p, BarrierLeft) for p in self.problems):  # apply refuses too: see the problem
                lines.append(f"  to do: reinstall torch ({inst.reinstall_command})")
            else:
                lines.append("  to do: 'torch-overlay apply --force' patches them as they are; "
                             f"reinstalling torch ({inst.reinstall_command}) puts the release's files back")
        elif not self.problems:
            lines.append("files differing from RECORD: none")
        return "\n".join(lines)

    def as_json(self) -> dict:
        """What ``status --json`` prints: the same facts as render(), for scripts."""
        return {
            "exit_code": self.exit_code,
            "torch_version": self.version,
            "torch_location": str(self.installation.site / "torch"),
            "series": self.series and {"release": self.series.version, "label": self.series.label,
                                       "patches": [p.name for p in self.series.patches]},
            "applied": self.applied and {"release": self.applied["torch_version"], "label": self.applied["label"],
                                         "patches": self.applied["patches"], "current": not self.outdated},
            "develop": self.develop and {"checkout": self.develop["checkout"], "base": self.develop["base"],
                                         "head": self.develop["head"], "branch": self.develop["branch"],
                                         "links": sorted(self.develop["links"])},
            "modified": self.modified,
            "recovered": self.recovered,
            "problems": [{"what": e.what, "unchanged": e.unchanged, "todo": e.todo} for e in self.problems],
        }

    def _outdated_advice(self) -> str:
        """The command that brings an outdated overlay to a consistent torch: apply, with the current series;
        revert, when this version of the tool has no series for the release (apply refuses there)."""
        if not self.outdated:
            return ""
        if self.series is None:
            return ("  (no series for this release in this version of torch-overlay: run 'torch-overlay revert' "
                    "to put the release's files back)")
        return "  (an older series: run 'torch-overlay apply' to update)"

    def _behaviour_lines(self) -> list[str]:
        found = behaviours(self.series)
        lines = [f"native to torch {self.series.version}: "
                 + (", ".join(f"{name} (since {since})" for name, since in found.native) or "none")]
        lines.append("added by the series: " + (", ".join(found.added) or "nothing (this release needs none)"))
        if found.missing:
            lines.append("missing (neither native nor in the series; a defect of the series): "
                         + ", ".join(found.missing))
        return lines


def finish_interrupted() -> str | None:
    """What every command that uses the installed torch runs first (demo, workspace)."""
    inst = TorchInstallation.of_running_interpreter()
    with exclusive_lock(inst.dist_info):
        return recover_interrupted(inst)


def status() -> Status:
    inst = TorchInstallation.of_running_interpreter()
    problems: list[OverlayError] = []
    with exclusive_lock(inst.dist_info):
        try:
            recovered = recover_interrupted(inst)
        except OverlayError as e:  # report it; changing nothing is all status can do
            recovered, problems = None, [e]
        try:
            version = inst.version
        except OverlayError as e:
            version = None
            problems.append(e)
        try:
            series = load_series(inst.release) if version else None
        except OverlayError:
            series = None
        targets = series.installed if series else []
        applied = None
        try:
            applied = inst.applied_state()
        except OverlayError as e:
            problems.append(e)
        # A file the series creates is torch's only while the series is applied (apply adds its RECORD row).
        not_yet = [p for p in (series.created if series else ()) if not (applied and p in applied["files"])]
        targets = [p for p in targets if p not in not_yet]
        problems += [OverlayError(f"{p} is in the way: the series creates it, but a file is already there",
                                  todo=f"move {inst.site / p} out of the way, then run 'torch-overlay apply'")
                     for p in sorted(not_yet) if (inst.site / p).exists()]
        if applied:
            targets = list(dict.fromkeys([*applied["files"], *targets]))
        links = applied.get(DEVELOP_KEY, {}).get("links", {}) if applied else {}
        if links:  # a link's bytes are the checkout's, whatever RECORD says: it is checked as a link
            broken = link_problems(inst, applied)
            problems += [OverlayError(f"{path} is {why}", todo=f"run 'torch-overlay develop "
                                      f"{applied[DEVELOP_KEY]['checkout']}' again, or 'torch-overlay revert'")
                         for path, why in broken.items()]
            targets = [p for p in targets if p not in links]
        try:
            modified = inst.file_problems(targets)
        except OverlayError as e:
            modified = {}
            problems.append(e)
        return Status(inst, version, series, applied, modified, recovered, problems)


def _refuse_unfit(inst: TorchInstallation, series: Series, force: bool) -> bool:
    """Refuse when a target is not the release's file; returns whether --force lets modified ones through."""
    problems = inst.file_problems([p for p in series.installed if p not in series.created])
    absent = [p for p, why in problems.items() if why == NOT_IN_RELEASE]
    if absent:
        patch = next(p for p in series.patches if absent[0] in p.touched)
        raise OverlayError(
            f"patch {patch.name} does not apply to torch {inst.version}: it changes {absent[0]}, which this torch "
            "does not have" + (f" (nor {', '.join(absent[1:])})" if absent[1:] else ""),
            unchanged="nothing was changed",
            todo=f"the series patches/{series.version} does not fit this release's files; port it "
                 "(see CONTRIBUTING.md, 'Porting the series to another release')")
    missing = [p for p, why in problems.items() if why == MISSING]
    if missing:
        raise OverlayError(
            "these torch files are missing (deleted after installation?): " + ", ".join(missing),
            unchanged="nothing was changed",
            todo=f"reinstall torch ('pip install --force-reinstall --no-deps torch=={series.version}'); "
                 "--force cannot patch a file that is not there")
    _refuse_occupied(inst, series)
    modified = [p for p, why in problems.items() if why == DIFFERS]
    if modified and not force:
        raise OverlayError(
            "these torch files differ from the wheel's RECORD (modified locally?): " + ", ".join(modified),
            unchanged="nothing was changed",
            todo="reinstall torch ('pip install --force-reinstall --no-deps torch==%s'), or pass --force "
                 "to patch the files as they are ('revert' then restores them as they are now)" % series.version)
    return bool(modified)


def _refuse_occupied(inst: TorchInstallation, series: Series) -> None:
    """Refuse a series that creates a file where one already is: revert deletes what the series created, so
    applying over a file would lose it (--force does not change that)."""
    present = [p for p in sorted(series.created) if (inst.site / p).exists() or (inst.site / p).is_symlink()]
    if not present:
        return
    patch = next(p for p in series.patches if present[0] in p.created)
    listed = present[0] in inst.record().entries()
    raise OverlayError(
        f"patch {patch.name} creates {present[0]}, but there is a file there already"
        + (" (the wheel's RECORD lists it: this release has that file)" if listed
           else " (not torch's: the wheel's RECORD does not list it)"),
        unchanged="nothing was changed",
        todo=(f"the series patches/{series.version} does not fit this release; port it (see CONTRIBUTING.md, "
              "'Porting the series to another release')") if listed
        else f"move {inst.site / present[0]} out of the way, then run 'torch-overlay apply' again")


def apply(force: bool = False) -> str:
    inst = TorchInstallation.of_running_interpreter()
    series = load_series(inst.release)
    with exclusive_lock(inst.dist_info):
        messages = [m for m in [recover_interrupted(inst)] if m]
        applied = inst.applied_state()
        check = None
        if series.patches or applied:
            check = guard_while_loaded(inst.site / "torch", "torch-overlay apply", force)
        if not series.patches:  # every behaviour is native to this release
            if applied:
                messages.append(revert_files(inst, applied, check))
            return "\n".join(messages + [f"torch {series.version} needs nothing: every behaviour of the overlay is "
                                         "native to this release ('torch-overlay status' lists them)"])
        if applied and applied["series_digest"] == series.digest:
            return "\n".join(messages + [f"already applied: the torch {series.version} series "
                                         f"({series.label}) is in place; nothing to do"])
        if applied:  # an older series: it comes off only once the new one is known to build on the release
            _check_builds_on_release(inst, applied, series)
        reverted = revert_files(inst, applied, check) if applied else None  # an older series: the release first
        with told_after(reverted):
            forced = _refuse_unfit(inst, series, force)
            patched = build_patched(series, lambda p: (inst.site / p).read_bytes())
            failpoint("built")
            install(inst, series_state(series, forced), patched, barrier_check=check)
        messages += [reverted] if reverted else []
        messages.append(f"applied the torch {series.version} series ({series.label}): "
                        + ", ".join(p.name for p in series.patches))
        return "\n".join(messages)


def _check_builds_on_release(inst: TorchInstallation, applied: dict, series: Series) -> None:
    """Build ``series`` on the release's files (the saved originals of what the applied series changed) and
    compile every Python file it makes, before apply takes the applied series off: a series that does not apply
    or makes a file that does not compile is refused while the applied one is still in place."""
    def release_bytes(path: str) -> bytes:
        info = applied["files"].get(path)
        if info is not None and info["pristine"] is not None:
            return saved_original(inst, path, info["pristine"])
        return (inst.site / path).read_bytes()

    for path, data in build_patched(series, release_bytes).items():
        if path.endswith(".py"):
            try:
                compile(data, str(inst.site / path), "exec", dont_inherit=True)
            except SyntaxError as e:
                raise OverlayError(f"the new {path} does not compile: {e.msg} (line {e.lineno})",
                                   unchanged="nothing was changed", todo="fix the patch that changes it") from None


def series_state(series: Series, forced: bool) -> dict:
    """What ``applied.json`` says about what was applied (its ``files`` come from :func:`state_files`)."""
    return {
        "torch_version": series.version,
        "series_digest": series.digest,
        "label": series.label,
        "patches": [p.name for p in series.patches],
        "forced": forced,
    }


def overlay_state(series: Series, patched: dict[str, bytes], pristine: dict[str, bytes | None],
                  record: Record, forced: bool) -> dict[str, bytes]:
    """The overlay state files of the series (see :func:`state_files`).

    Shared by in-place apply and rebuild-wheel, so an installed rebuilt wheel
    can be reported on and reverted like an in-place apply."""
    return state_files(series_state(series, forced), patched, pristine, record)


def revert(force: bool = False) -> str:
    inst = TorchInstallation.of_running_interpreter()
    with exclusive_lock(inst.dist_info):
        messages = [m for m in [recover_interrupted(inst)] if m]
        state = inst.applied_state()
        if not state:
            return "\n".join(messages + ["nothing to revert: no overlay is applied to this torch"])
        check = guard_while_loaded(inst.site / "torch", "torch-overlay revert", force)
        messages.append(revert_files(inst, state, check))
        return "\n".join(messages)


