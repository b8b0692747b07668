"""Debian's source package of PyTorch 2.6.0: the real upstream tree of a release, fetched without git.

Debian trixie's ``pytorch`` source package (2.6.0+dfsg) is PyTorch's v2.6.0 tree (``pytorch-v2.6.0/``) less
what Debian's ``Files-Excluded`` drops (.ci/, .github/, vendored third_party/ libraries and a few binary
test assets); torch/, test/, tools/, setup.py and version.txt are upstream's. Two users share one download:
scripts/upstream_suite.py (PyTorch's own tests) and test/overlay/test_apply_source_debian.py (apply-source on
a real tree). It is fetched with ``apt-get source --download-only`` under a private apt configuration (its own
source list, state and cache in build/debian-pytorch/apt), so the system's apt set-up is left alone, and is
kept in build/debian-pytorch/download.
"""
from __future__ import annotations

import glob
import subprocess
from pathlib import Path

from torch_overlay.cache_lock import cache_lock

REPO = Path(__file__).resolve().parents[1]
RELEASE = "2.6.0"  # the only release Debian packages with the full tree (trixie)
DEBIAN_SOURCE = "pytorch"
DEBIAN_VERSION_PREFIX = f"{RELEASE}+dfsg"
DEBIAN_SOURCES_LINE = "deb-src http://deb.debian.org/debian trixie main"
CACHE = REPO / "build" / "debian-pytorch"


def apt_options(apt_dir: Path) -> list[str]:
    """A private apt configuration: its own source list, state and cache, none of the system's lists."""
    return [
        "-o", f"Dir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State={apt_dir / 'state'}",
        "-o", f"Dir::Cache={apt_dir / 'cache'}",
    ]


def _found(download: Path) -> list[str]:
    return glob.glob(str(download / f"{DEBIAN_SOURCE}_{DEBIAN_VERSION_PREFIX}.orig.tar.*"))


def orig_tarball(cache: Path = CACHE, say=print) -> Path:
    """The upstream tarball of Debian's source package (``pytorch_2.6.0+dfsg.orig.tar.xz``), downloaded once."""
    download = cache / "download"
    with cache_lock(cache / "download.lock"):
        if not _found(download):
            apt_dir = cache / "apt"
            for sub in ("state/lists/partial", "cache/archives/partial"):
                (apt_dir / sub).mkdir(parents=True, exist_ok=True)
            (apt_dir / "sources.list").write_text(DEBIAN_SOURCES_LINE + "\n")
            download.mkdir(parents=True, exist_ok=True)
            say(f"apt-get source {DEBIAN_SOURCE} ({DEBIAN_SOURCES_LINE}; private apt configuration in {apt_dir})")
            subprocess.run(["apt-get", *apt_options(apt_dir), "-q", "update"], check=True)
            subprocess.run(["apt-get", *apt_options(apt_dir), "-q", "source", "--download-only", DEBIAN_SOURCE],
                           cwd=download, check=True)
        found = _found(download)
    if len(found) != 1:
        raise RuntimeError(f"expected one {DEBIAN_SOURCE}_{DEBIAN_VERSION_PREFIX}.orig.tar.* in {download}, "
                           f"found {found or 'none'} (apt-get source fetched another version?)")
    return Path(found[0])


def unpack(tarball: Path, dest: Path, *members: str) -> Path:
    """Unpack ``members`` (tar wildcards; all when none) into ``dest``; returns the tree's top folder."""
    dest.mkdir(parents=True, exist_ok=True)
    wildcards = ["--wildcards", *members] if members else []
    subprocess.run(["tar", "xf", str(tarball), "--no-same-owner", "-C", str(dest), *wildcards], check=True)
    (tree,) = [p for p in dest.iterdir() if p.is_dir()]
    return tree
