"""``torch-overlay rebuild-wheel``: a torch release wheel with the series applied.

The new wheel is the release wheel with the series' target files replaced, the
overlay state (``overlay/applied.json`` and the saved originals) added to its
``.dist-info`` just as an in-place ``apply`` leaves them, and a local version
label.  Installed with pip, it gives a torch that ``status`` reports as patched
and ``revert`` takes back to the release.

A torch wheel is about 900 MB, nearly all of it members we do not change, so
those are copied as their compressed bytes, never inflated and deflated again.
Every copied member is still inflated once on the way and checked against its
CRC and the wheel's RECORD, so a damaged release wheel is refused here rather
than by pip on a cluster node.

The wheel is written to a hidden, locked ``.part`` file in the output folder
and renamed into place at the end, so a failure leaves no partial wheel
behind; one that a kill -9 leaves is unlocked, and the next run removes it.
"""
from __future__ import annotations

import copy
import csv
import errno
import io
import fcntl
import hashlib
import os
import re
import struct
import sys
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from .build import build_patched
from .errors import OverlayError
from .inplace import overlay_state
from .pristine import from_wheel, read_member, wheel_dist_info
from .record import Record, sha256_field
from .series import Series, default_patches_root, load_series, supported_versions
from .transaction import failpoint

# {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
_WHEEL_FILE_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?P<build>-\d[^-]*)?(?P<tags>(?:-[^-]+){3})\.whl$")
# PEP 440 local version label: ASCII letters and digits in parts separated by '.', '-' or '_'.
_LOCAL_LABEL_RE = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)*$", re.IGNORECASE)
_LOCAL_HEADER_SIZE = 30
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
_DATA_DESCRIPTOR_FLAG = 0x08
_ZIP64_EXTRA_ID = 0x0001
_COPY_CHUNK = 4 << 20
_GET_A_WHEEL = "pass a torch release wheel, e.g. from 'pip download torch==2.5.1 --no-deps -d DIR'"


def normalized_local_label(label: str) -> str:
    """A user's local version label, checked and in PEP 440 normal form."""
    if not _LOCAL_LABEL_RE.match(label):
        raise OverlayError(
            f"--local-version {label!r} is not a PEP 440 local version label",
            unchanged="no wheel was written",
            todo="use ASCII letters and digits in parts separated by '.', without a leading '+', e.g. 'overlay.1'")
    return re.sub(r"[-_]", ".", label.lower())


@dataclass
class ReleaseWheel:
    """A torch release wheel, opened and checked."""

    path: Path
    zip: zipfile.ZipFile
    dist_info: str   # e.g. "torch-2.5.1.dist-info"
    version: str     # METADATA's Version, e.g. "2.5.1"
    file_name: re.Match

    @classmethod
    def open(cls, wheel: Path) -> "ReleaseWheel":
        def refuse(what: str) -> OverlayError:
            return OverlayError(what, unchanged="no wheel was written", todo=_GET_A_WHEEL)

        try:
            zf = zipfile.ZipFile(wheel)
        except zipfile.BadZipFile:
            raise refuse(f"{wheel} is not a wheel (not a zip archive)") from None
        except OSError as e:
            raise refuse(f"cannot read {wheel}: {e.strerror or e}") from None
        file_name = _WHEEL_FILE_RE.match(wheel.name)
        if not file_name:
            raise refuse(f"{wheel.name} is not named like a wheel (NAME-VERSION-PYTHON-ABI-PLATFORM.whl)")
        try:
            dist_info = wheel_dist_info(zf.namelist())
            metadata = HeaderParser().parsestr(read_member(zf, f"{dist_info}/METADATA", wheel.name).decode("utf-8"))
        except (OverlayError, KeyError, UnicodeDecodeError) as e:
            why = getattr(e, "what", None) or ("it has no METADATA" if isinstance(e, KeyError) else str(e))
            raise refuse(f"{wheel.name} is not a wheel: {why}") from None
        name, version = metadata["Name"] or "", metadata["Version"] or ""
        if re.sub(r"[-_.]+", "-", name).lower() != "torch":
            raise refuse(f"{wheel.name} is a wheel of {name or 'an unnamed project'}, not of torch")
        if "+" in version:
            raise OverlayError(
                f"{wheel.name} is torch {version}, which already has a local version label "
                f"(+{version.split('+', 1)[1]}); a version can carry only one",
                unchanged="no wheel was written",
                todo=f"rebuild from the release wheel of torch {version.split('+', 1)[0]} "
                     "('pip download torch==%s --no-deps -d DIR')" % version.split("+", 1)[0])
        return cls(wheel, zf, dist_info, version, file_name)

    def read_text(self, member: str) -> str:
        name = f"{self.dist_info}/{member}"
        try:
            return read_member(self.zip, name, self.path.name).decode("utf-8")
        except UnicodeDecodeError as e:
            raise OverlayError(f"{name} in {self.path.name} cannot be read ({e}); the wheel is damaged",
                               unchanged="no wheel was written", todo=_GET_A_WHEEL) from None

    def renamed_file(self, version: str) -> str:
        """The wheel's file name for ``version``, keeping its build and compatibility tags."""
        parts = self.file_name
        return f"{parts['name']}-{version}{parts['build'] or ''}{parts['tags']}.whl"


@dataclass
class Edits:
    """How the rebuilt wheel differs from the release wheel."""

    old_dist_info: str
    new_dist_info: str
    replaced: dict[str, bytes]  # release member name -> new bytes (targets, METADATA, RECORD)
    added: dict[str, bytes]     # new member name -> bytes (files the series creates, overlay state)

    def new_name(self, member: str) -> str:
        old = self.old_dist_info
        if member == old or member.startswith(old + "/"):
            return self.new_dist_info + member[len(old):]
        return member


def _edits(release: ReleaseWheel, series: Series, new_version: str) -> Edits:
    read_pristine = from_wheel(release.path)
    patched = build_patched(series, read_pristine)
    pristine = {p: None if p in series.created else read_pristine(p) for p in patched}
    old = release.dist_info
    new = f"{old[:-len('.dist-info')].rsplit('-', 1)[0]}-{new_version}.dist-info"
    record = Record.parse(release.read_text("RECORD"))
    state_files = overlay_state(series, patched, pristine, record, forced=False)

    members = set(release.zip.namelist())
    edits = Edits(old, new, replaced={}, added={})
    record.lines = [new + line[len(old):] if line.startswith(old + "/") else line for line in record.lines]
    for path, data in patched.items():
        (edits.replaced if path in members else edits.added)[path] = data
        record.put(path, data)
    for name, data in state_files.items():
        edits.added[f"{new}/{name}"] = data
        record.put(f"{new}/{name}", data)
    metadata = _with_version(release.read_text("METADATA"), release.version, new_version).encode("utf-8")
    edits.replaced[f"{old}/METADATA"] = metadata
    record.put(f"{new}/METADATA", metadata)
    edits.replaced[f"{old}/RECORD"] = record.render().encode("utf-8")
    return edits


def _with_version(metadata: str, version: str, new_version: str) -> str:
    """METADATA with its Version header changed and every other byte kept."""
    pattern = r"^(Version:[ \t]*)" + re.escape(version) + r"(?=[ \t]*\r?$)"
    text, count = re.subn(pattern, lambda m: m.group(1) + new_version, metadata, count=1, flags=re.M)
    if count != 1:
        raise OverlayError(f"cannot find the 'Version: {version}' line in the wheel's METADATA",
                           unchanged="no wheel was written", todo=_GET_A_WHEEL)
    return text


class _Progress:
    """Percent of the release wheel's bytes processed, on stderr every 10%."""

    def __init__(self, total: int):
        self.total = max(total, 1)
        self.done = 0
        self.next_report = 10

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        percent = self.done * 100 // self.total
        if percent >= self.next_report:
            print(f"rebuild-wheel: {percent}% ({self.done >> 20} of {self.total >> 20} MiB)",
                  file=sys.stderr, flush=True)
            self.next_report = percent // 10 * 10 + 10


def _without_zip64(extra: bytes) -> bytes:
    """An extra field minus its zip64 record, which ZipFile writes afresh when one is needed."""
    kept, i = [], 0
    while i + 4 <= len(extra):
        xid, size = struct.unpack_from("<HH", extra, i)
        if xid != _ZIP64_EXTRA_ID:
            kept.append(extra[i:i + 4 + size])
        i += 4 + size
    return b"".join(kept)


class _MemberCheck:
    """Inflates a member's compressed bytes as they are copied and checks the result against the
    zip entry's CRC-32 and size and the sha256 and size the wheel's RECORD lists for it."""

    def __init__(self, wheel: Path, info: zipfile.ZipInfo, recorded: list[str] | None):
        self.wheel, self.info, self.recorded = wheel, info, recorded
        if info.compress_type == zipfile.ZIP_DEFLATED:
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        elif info.compress_type == zipfile.ZIP_STORED:
            self._inflate = None
        else:
            raise self._damaged(f"compression method {info.compress_type}, which wheels do not use")
        self._crc, self._size, self._sha = 0, 0, hashlib.sha256()

    def _damaged(self, why: str) -> OverlayError:
        return OverlayError(f"{self.info.filename} in {self.wheel.name} is damaged: {why}",
                            unchanged="no wheel was written", todo="download the release wheel again")

    def _take(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._sha.update(data)

    def update(self, chunk: bytes) -> None:
        try:
            self._take(self._inflate.decompress(chunk) if self._inflate else chunk)
        except zlib.error as e:
            raise self._damaged(f"its compressed data is corrupt ({e})") from None

    def verify(self) -> None:
        if self._inflate:
            self.update(b"")
            self._take(self._inflate.flush())
            if not self._inflate.eof:
                raise self._damaged("its compressed data is cut short")
        if (self._crc, self._size) != (self.info.CRC, self.info.file_size):
            raise self._damaged("its CRC-32 or size does not match the zip directory")
        if self.info.is_dir():  # a folder entry: nothing to hash, RECORD lists files only
            return
        if self.recorded is None or len(self.recorded) < 2:
            raise self._damaged("the wheel's RECORD does not list it")
        if (self.recorded[0], self.recorded[1]) != (sha256_field(self._sha.digest()), str(self._size)):
            raise self._damaged("its sha256 or size differs from the wheel's RECORD")


def _copy_compressed(src, info: zipfile.ZipInfo, name: str, out: zipfile.ZipFile, progress: _Progress,
                     check: _MemberCheck) -> None:
    """Append ``info``'s member of ``src`` to ``out`` as ``name``, compressed bytes as they are.

    ZipFile has no public way to add already-compressed data, so this writes the
    local header and data itself and registers the entry the way ZipFile.writestr
    does (filelist, NameToInfo, start_dir), so close() lists it in the central
    directory.  The data descriptor flag is dropped: the sizes go in the header."""
    src.seek(info.header_offset)
    header = src.read(_LOCAL_HEADER_SIZE)
    if header[:4] != _LOCAL_HEADER_SIGNATURE:
        raise OverlayError(f"{info.filename} in the wheel has no valid zip header; the wheel is damaged",
                           unchanged="no wheel was written", todo="download it again")
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    src.seek(info.header_offset + _LOCAL_HEADER_SIZE + name_len + extra_len)
    entry = copy.copy(info)
    entry.filename = name
    entry.flag_bits &= ~_DATA_DESCRIPTOR_FLAG
    entry.extra = _without_zip64(info.extra)
    entry.header_offset = out.fp.tell()
    out.fp.write(entry.FileHeader())
    remaining = info.compress_size
    while remaining:
        chunk = src.read(min(_COPY_CHUNK, remaining))
        if not chunk:
            raise OverlayError(f"{info.filename} is cut short in the wheel; the wheel is damaged",
                               unchanged="no wheel was written", todo="download it again")
        check.update(chunk)
        out.fp.write(chunk)
        remaining -= len(chunk)
        progress.advance(len(chunk))
    check.verify()
    out.filelist.append(entry)
    out.NameToInfo[name] = entry
    out.start_dir = out.fp.tell()
    out._didModify = True


def _new_member(name: str, like: zipfile.ZipInfo) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, like.date_time)
    info.external_attr = like.external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _write(release: ReleaseWheel, edits: Edits, out_file) -> None:
    members = release.zip.infolist()
    progress = _Progress(sum(m.compress_size for m in members))
    record_info = release.zip.getinfo(f"{edits.old_dist_info}/RECORD")
    recorded = {row[0]: row[1:] for row in csv.reader(io.StringIO(release.read_text("RECORD"))) if row}
    with open(release.path, "rb") as src, zipfile.ZipFile(out_file, "w") as out:
        for info in members:
            name = edits.new_name(info.filename)
            if info.filename in edits.replaced:
                out.writestr(_new_member(name, info), edits.replaced[info.filename])
                progress.advance(info.compress_size)
            else:
                check = _MemberCheck(release.path, info, recorded.get(info.filename))
                _copy_compressed(src, info, name, out, progress, check)
        failpoint("rebuild-wheel-copied")
        for name, data in edits.added.items():
            out.writestr(_new_member(name, record_info), data)


def _series_for(release: ReleaseWheel) -> Series:
    if release.version not in supported_versions(default_patches_root()):
        try:
            load_series(release.version)  # its message names the supported releases
        except OverlayError as e:
            raise OverlayError(e.what, unchanged="no wheel was written",
                               todo="pass the wheel of a release that has a series "
                                    "('pip download torch==VERSION --no-deps -d DIR')") from None
    return load_series(release.version)


def _remove_stale_parts(outdir: Path) -> None:
    """Remove the partial wheels of runs that were killed: a running one holds a lock on its file."""
    for part in outdir.glob(".torch-*.whl.*.part"):
        try:
            fd = os.open(part, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            size = os.fstat(fd).st_size
            part.unlink()
            print(f"rebuild-wheel: removed {part.name} ({size >> 20} MiB), left by an interrupted run",
                  file=sys.stderr, flush=True)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        finally:
            os.close(fd)


def rebuild_wheel(wheel: Path, outdir: Path, local_label: str | None) -> Path:
    """Write ``wheel`` with its release's series applied into ``outdir``; return the new wheel's path."""
    started = time.monotonic()
    label = normalized_local_label(local_label) if local_label is not None else None
    release = ReleaseWheel.open(wheel)
    series = _series_for(release)
    new_version = f"{release.version}+{label or series.label}"
    edits = _edits(release, series, new_version)
    target = outdir / release.renamed_file(new_version)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        _remove_stale_parts(outdir)
        fd, partial = tempfile.mkstemp(dir=outdir, prefix=f".{target.name}.", suffix=".part")
    except OSError as e:
        raise OverlayError(f"cannot write to {outdir}: {e.strerror or e}", unchanged="no wheel was written",
                           todo="choose an --output folder you can write to") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # ours while we live: a later run leaves it alone
        with os.fdopen(fd, "w+b") as out_file:
            _write(release, edits, out_file)
            out_file.flush()
            os.fsync(out_file.fileno())
            failpoint("rebuild-wheel-written")
            os.chmod(partial, 0o644)
            os.replace(partial, target)
    except BaseException as e:
        Path(partial).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise OverlayError(f"writing {target} failed: {e.strerror or e}",
                               unchanged=f"no wheel was left in {outdir}",
                               todo="free some disk space or choose another --output folder") from None
        raise
    print(f"rebuild-wheel: wrote {target.name} ({target.stat().st_size >> 20} MiB) "
          f"in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    return target
