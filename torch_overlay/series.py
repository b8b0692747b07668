"""The patch series: ``patches/<torch-version>/series`` and its patch files.

A series line names a patch file in the release's own folder (``163673-annotate.patch``)
or, for a patch that applies unchanged to several releases, the one copy kept in another
release's folder (``../2.5.1/163673-annotate.patch``): a patch is stored once.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OverlayError

PATCHES_ENV = "TORCH_OVERLAY_PATCHES"
DEP3_FIELDS = ("Description", "Origin", "Forwarded", "Applied-Upstream", "Patch-Name")
# Optional: the patches a pull request of the series sits on (torch_overlay/stacks.py reads and checks it).
OPTIONAL_FIELDS = ("Stack", "Superseded-Upstream")


def default_patches_root() -> Path:
    """Where the series live: $TORCH_OVERLAY_PATCHES, else the checkout's
    ``patches/`` beside this package, else the copy packaged inside it."""
    if os.environ.get(PATCHES_ENV):
        return Path(os.environ[PATCHES_ENV])
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "patches", here / "_patches"):
        if candidate.is_dir():
            return candidate
    raise OverlayError("torch-overlay cannot find its patches folder", todo=f"set {PATCHES_ENV} to a patches/ folder")


_RELEASE_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def release_key(version: str) -> tuple[int, ...]:
    """'2.10.0' -> (2, 10, 0): releases compare as numbers, so 2.10.0 comes after 2.9.1."""
    m = _RELEASE_RE.match(version)
    return tuple(map(int, m.groups())) if m else ()


def supported_versions(root: Path) -> list[str]:
    """The releases that have a series, oldest first."""
    return sorted((p.parent.name for p in root.glob("*/series") if release_key(p.parent.name)), key=release_key)


def nearest_supported(version: str, supported: list[str]) -> tuple[str, str] | None:
    """(a sentence naming the supported releases nearest to ``version``, the one to install).

    A patch release in between (2.7.0 when 2.7.1 has the series) is pointed to the
    supported patch release of the same minor."""
    key = release_key(version)
    if not supported or not key:
        return None
    same_minor = [v for v in supported if release_key(v)[:2] == key[:2]]
    if same_minor:
        return f"torch {same_minor[-1]} is the supported release of {key[0]}.{key[1]}", same_minor[-1]
    older = [v for v in supported if release_key(v) < key]
    newer = [v for v in supported if release_key(v) > key]
    if older and newer:
        return f"the nearest supported releases are {older[-1]} and {newer[0]}", newer[0]
    if older:
        return f"the newest supported release is {older[-1]}", older[-1]
    return f"the oldest supported release is {newer[0]}", newer[0]


def unsupported_release(version: str, root: Path) -> OverlayError:
    """The error for a release without a series, naming where its user can go."""
    supported = supported_versions(root)
    nearest = nearest_supported(version, supported)
    return OverlayError(f"torch-overlay has no patch series for torch {version} "
                        f"(supported: {', '.join(supported) or 'none'})",
                        unchanged="nothing was changed",
                        todo=f"{nearest[0]}: 'pip install torch=={nearest[1]}'" if nearest else "")


# Upstream's test tree. A patch carries its test there, as the upstream pull request would; only a source
# checkout has that tree, so applying to an installed torch or a wheel (torch/ alone) leaves those files out.
TEST_TREE = "test/"


def in_test_tree(path: str) -> bool:
    return path.startswith(TEST_TREE)


@dataclass
class Patch:
    name: str  # file name, e.g. "163673-annotate.patch"
    path: Path
    subject: str
    fields: dict[str, str]
    touched: list[str]  # repository paths the patch modifies or creates
    created: list[str] = field(default_factory=list)  # paths the patch creates


@dataclass
class Series:
    version: str
    folder: Path
    patches: list[Patch]

    @property
    def touched(self) -> list[str]:
        """Every path some patch touches, in first-touched order."""
        seen: dict[str, None] = {}
        for p in self.patches:
            seen.update(dict.fromkeys(p.touched))
        return list(seen)

    @property
    def created(self) -> set[str]:
        return {c for p in self.patches for c in p.created}

    @property
    def installed(self) -> list[str]:
        """The touched paths an installed torch or a wheel holds: all but upstream's test tree."""
        return [p for p in self.touched if not in_test_tree(p)]

    @property
    def tests(self) -> list[str]:
        """The files of upstream's test tree the series touches (the tests a patch brings with it)."""
        return [p for p in self.touched if in_test_tree(p)]

    @property
    def digest(self) -> str:
        """What is applied, not how it is stored: the patches' names and bytes in order.

        Comments in the series file and where a patch is kept (its release's folder or,
        stored once, another's) do not change it."""
        h = hashlib.sha256()
        for p in self.patches:
            data = p.path.read_bytes()
            h.update(f"{p.name}\n{len(data)}\n".encode())
            h.update(data)
        return h.hexdigest()

    @property
    def label(self) -> str:
        """PEP 440 local version label naming this exact series."""
        return f"overlay.g{self.digest[:8]}"


_DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def parse_patch(path: Path) -> Patch:
    text = path.read_text()
    head, sep, _ = text.partition("\n---\n")
    if not sep or not _DIFF_RE.search(text):
        raise OverlayError(f"{path} is not a git format-patch file (no '---' separator or no 'diff --git' line)",
                           todo="regenerate it with 'torch-overlay refresh'")
    subject = ""
    subj = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n [^\n]*)*)", head, re.M)
    if subj:
        subject = " ".join(subj.group(1).split())
    fields = {}
    for line in head.splitlines():
        key, colon, value = line.partition(": ")
        if colon and key in DEP3_FIELDS + OPTIONAL_FIELDS:
            fields[key] = value.strip()
    missing = [k for k in DEP3_FIELDS[:4] if k not in fields]
    if missing:
        raise OverlayError(f"{path} lacks the DEP-3 header field(s) {', '.join(missing)}",
                           todo="add them to the commit message (see CONTRIBUTING.md) and refresh")
    touched = []
    for a, b in _DIFF_RE.findall(text):
        touched += [x for x in dict.fromkeys((a, b)) if x not in touched]
    created = re.findall(r"^diff --git a/\S+ b/(\S+)\nnew file mode", text, re.M)
    return Patch(path.name, path, subject, fields, touched, created)


SERIES_FILE = "series"
PATCH_SUFFIX = ".patch"
# A series line: a patch file in the release's folder, or one stored once in another release's folder.
_ENTRY_RE = re.compile(r"(?:\.\./([^/]+)/)?([^/]+\.patch)")


def series_entries(series_file: Path) -> list[str]:
    """The patch lines of a series file, in order (comments and blank lines left out)."""
    return [l.strip() for l in series_file.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]


def entry_path(folder: Path, entry: str) -> Path:
    """The file a series line names: ``NAME.patch`` in ``folder``, or ``../RELEASE/NAME.patch``."""
    m = _ENTRY_RE.fullmatch(entry)
    if not m or m.group(1) in (".", ".."):
        raise OverlayError(f"{folder / SERIES_FILE} lists {entry!r}, which is neither a patch file in {folder} nor "
                           "a patch stored in another release's folder ('../<release>/<name>.patch')",
                           unchanged="nothing was changed", todo="fix the line, or regenerate the series with "
                                                                 "'torch-overlay refresh'")
    return folder / entry


def entry_for(folder: Path, path: Path) -> str:
    """The series line of ``folder`` that names the patch file ``path``."""
    return path.name if path.parent.resolve() == folder.resolve() else f"../{path.parent.name}/{path.name}"


def series_using(root: Path, path: Path) -> list[str]:
    """The releases whose series apply the patch file ``path`` (stored once, it serves several)."""
    users = []
    for version in supported_versions(root):
        folder = root / version
        if any(entry_path(folder, e).resolve() == path.resolve() for e in series_entries(folder / SERIES_FILE)):
            users.append(version)
    return users


def load_series(version: str, root: Path | None = None) -> Series:
    root = root or default_patches_root()
    folder = root / version
    series_file = folder / SERIES_FILE
    if not series_file.is_file():
        raise unsupported_release(version, root)
    patches: list[Patch] = []
    for entry in series_entries(series_file):
        path = entry_path(folder, entry)
        if not path.is_file():
            raise OverlayError(f"{series_file} lists {entry}, which does not exist", unchanged="nothing was changed")
        if any(p.name == path.name for p in patches):
            raise OverlayError(f"{series_file} lists {path.name} twice", unchanged="nothing was changed",
                               todo="each patch is applied once: remove one of the lines")
        patches.append(parse_patch(path))
    return Series(version, folder, patches)
