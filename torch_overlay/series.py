"""The patch series: ``patches/<torch-version>/series`` and its patch files."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OverlayError

PATCHES_ENV = "TORCH_OVERLAY_PATCHES"
DEP3_FIELDS = ("Description", "Origin", "Forwarded", "Applied-Upstream", "Patch-Name")


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


def supported_versions(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/series"))


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
    def digest(self) -> str:
        h = hashlib.sha256((self.folder / "series").read_bytes())
        for p in self.patches:
            h.update(p.path.read_bytes())
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
        if colon and key in DEP3_FIELDS:
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


def load_series(version: str, root: Path | None = None) -> Series:
    root = root or default_patches_root()
    folder = root / version
    series_file = folder / "series"
    if not series_file.is_file():
        supported = ", ".join(supported_versions(root)) or "none"
        raise OverlayError(f"torch-overlay has no patch series for torch {version} (supported: {supported})",
                           unchanged="nothing was changed",
                           todo=f"install a supported torch, e.g. 'pip install torch=={supported_versions(root)[-1]}'"
                           if supported_versions(root) else "")
    names = [l.strip() for l in series_file.read_text().splitlines() if l.strip() and not l.lstrip().startswith("#")]
    patches = []
    for name in names:
        if not (folder / name).is_file():
            raise OverlayError(f"{series_file} lists {name}, which does not exist")
        patches.append(parse_patch(folder / name))
    return Series(version, folder, patches)
