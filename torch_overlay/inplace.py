"""status / apply / revert on the torch installation of the running interpreter."""
from __future__ import annotations

import json
import py_compile
import tempfile
from dataclasses import dataclass

from .build import build_patched
from .errors import OverlayError
from .installation import STATE_DIR, STATE_FILE, TorchInstallation
from .record import Record, record_hash, record_line
from .series import Series, load_series
from .transaction import Transaction, exclusive_lock, failpoint, recover


@dataclass
class Status:
    installation: TorchInstallation
    series: Series | None
    applied: dict | None
    modified: list[str]     # series targets whose bytes differ from RECORD
    recovered: str | None   # what recovery did, if anything

    def render(self) -> str:
        inst = self.installation
        lines = [f"torch {inst.version} at {inst.site / 'torch'}"]
        if self.recovered:
            lines.append(f"recovered: {self.recovered}")
        if self.series is None:
            lines.append("series: none for this release")
        else:
            lines.append(f"series: patches/{self.series.version} ({len(self.series.patches)} patches, {self.series.label})")
        if self.applied:
            current = self.series is not None and self.applied["series_digest"] == self.series.digest
            lines.append("applied: " + ", ".join(self.applied["patches"])
                         + ("" if current else "  (an older series: run 'torch-overlay apply' to update)"))
        else:
            lines.append("applied: none")
        if self.modified:
            lines.append("files differing from RECORD: " + ", ".join(self.modified))
        else:
            lines.append("files differing from RECORD: none")
        return "\n".join(lines)


def _check_writable(inst: TorchInstallation) -> None:
    for d in (inst.dist_info, inst.site / "torch"):
        try:
            with tempfile.TemporaryFile(dir=d):
                pass
        except OSError as e:
            raise OverlayError(
                f"cannot write to {d}: {e.strerror}",
                unchanged="nothing was changed",
                todo="run torch-overlay as the user that owns this environment, or use "
                     "'torch-overlay rebuild-wheel' and install that wheel instead") from None


def _status_unlocked(inst: TorchInstallation, recovered: str | None) -> Status:
    try:
        series = load_series(inst.release)
    except OverlayError:
        series = None
    targets = series.touched if series else []
    applied = inst.applied_state()
    if applied:
        targets = list(dict.fromkeys([*applied["files"], *targets]))
    return Status(inst, series, applied, inst.modified_files(targets), recovered)


def status() -> Status:
    inst = TorchInstallation.of_running_interpreter()
    with exclusive_lock(inst.dist_info):
        recovered = recover(inst.dist_info)
        return _status_unlocked(inst, recovered)


def _recompile(inst: TorchInstallation, paths) -> None:
    for p in paths:
        if p.endswith(".py") and (inst.site / p).exists():
            py_compile.compile(str(inst.site / p), doraise=True)


def apply(force: bool = False) -> str:
    inst = TorchInstallation.of_running_interpreter()
    series = load_series(inst.release)
    with exclusive_lock(inst.dist_info):
        messages = [m for m in [recover(inst.dist_info)] if m]
        applied = inst.applied_state()
        if applied and applied["series_digest"] == series.digest:
            return "\n".join(messages + [f"already applied: the torch {series.version} series "
                                         f"({series.label}) is in place; nothing to do"])
        _check_writable(inst)
        if applied:  # an older series: back to the release first, then the current series
            messages.append(_revert_locked(inst))
        modified = inst.modified_files([p for p in series.touched if p not in series.created])
        if modified and not force:
            raise OverlayError(
                "these torch files differ from the wheel's RECORD (modified locally?): " + ", ".join(modified),
                unchanged="nothing was changed",
                todo="reinstall torch ('pip install --force-reinstall --no-deps torch==%s'), or pass --force "
                     "to patch the files as they are ('revert' then restores them as they are now)" % series.version)
        patched = build_patched(series, lambda p: (inst.site / p).read_bytes())
        _install(inst, series, patched, forced=bool(modified))
        _recompile(inst, patched)
        messages.append(f"applied the torch {series.version} series ({series.label}): "
                        + ", ".join(p.name for p in series.patches))
        return "\n".join(messages)


def overlay_state(series: Series, patched: dict[str, bytes], pristine: dict[str, bytes | None],
                  record: Record, forced: bool) -> dict[str, bytes]:
    """The overlay state files (paths relative to the dist-info folder):
    ``overlay/applied.json`` and the saved originals beside it.

    Shared by in-place apply and rebuild-wheel, so an installed rebuilt wheel
    can be reported on and reverted like an in-place apply."""
    state = {
        "torch_version": series.version,
        "series_digest": series.digest,
        "label": series.label,
        "patches": [p.name for p in series.patches],
        "forced": forced,
        "files": {},
    }
    files = {}
    for path, data in patched.items():
        old = pristine[path]
        state["files"][path] = {
            "pristine": record_hash(old) if old is not None else None,
            "patched": record_hash(data),
            "record_line": record.find(path),
        }
        if old is not None:
            files[f"{STATE_DIR}/pristine/{path}.orig"] = old
    files[f"{STATE_DIR}/{STATE_FILE}"] = json.dumps(state, indent=1, sort_keys=True).encode()
    return files


def _install(inst: TorchInstallation, series: Series, patched: dict[str, bytes], forced: bool) -> None:
    record = inst.record()
    pristine = {p: (inst.site / p).read_bytes() if (inst.site / p).exists() else None for p in patched}
    state_files = overlay_state(series, patched, pristine, record, forced)
    txn = Transaction(inst.site, inst.dist_info)
    dist = inst.relpath(inst.dist_info)
    for path, data in patched.items():
        txn.write(path, data)
        record.replace(path, record_line(path, data))
    for name, data in state_files.items():
        txn.write(f"{dist}/{name}", data)
        record.replace(f"{dist}/{name}", record_line(f"{dist}/{name}", data))
    txn.write(f"{dist}/RECORD", record.render().encode())
    txn.commit()


def revert() -> str:
    inst = TorchInstallation.of_running_interpreter()
    with exclusive_lock(inst.dist_info):
        messages = [m for m in [recover(inst.dist_info)] if m]
        if not inst.applied_state():
            return "\n".join(messages + ["nothing to revert: no overlay is applied to this torch"])
        _check_writable(inst)
        messages.append(_revert_locked(inst))
        return "\n".join(messages)


def _revert_locked(inst: TorchInstallation) -> str:
    state = inst.applied_state()
    record = inst.record()
    dist = inst.relpath(inst.dist_info)
    txn = Transaction(inst.site, inst.dist_info)
    for path, info in state["files"].items():
        if info["pristine"] is None:
            txn.delete(path)
        else:
            data = inst.pristine_copy(path).read_bytes()
            if record_hash(data) != info["pristine"]:
                raise OverlayError(f"the saved original of {path} is damaged (hash mismatch)",
                                   unchanged="nothing was changed",
                                   todo="reinstall torch: pip install --force-reinstall --no-deps torch")
            txn.write(path, data)
        record.replace(path, info["record_line"])
    for f in sorted(inst.state_dir.rglob("*")):
        if f.is_file():
            record.replace(inst.relpath(f), None)
    txn.write(f"{dist}/RECORD", record.render().encode())
    txn.delete(f"{dist}/{STATE_DIR}")
    failpoint("revert-staged")
    txn.commit()
    _recompile(inst, state["files"])
    return f"reverted {len(state['files'])} files to the torch {state['torch_version']} release: " + ", ".join(state["files"])
