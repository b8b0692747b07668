"""Which of the overlay's behaviours a release ships natively and which its series adds.

The reference series (2.5.1, a release with none of them) holds every behaviour, one patch each.
A backport's Applied-Upstream header names the first release that ships the upstream change; a
local patch is never applied upstream (Applied-Upstream: no), but where upstream reached the same
behaviour by a change of its own, its Superseded-Upstream header names the first release that has
it. A newer release's series keeps only what that release lacks, so for a release R a behaviour is
native when that release is R or older, and added when R's series carries it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .series import Series, load_series, release_key

REFERENCE_RELEASE = "2.5.1"


def native_from(applied_upstream: str) -> str | None:
    """'2.10.0' -> '2.10.0'; 'no' (or anything without a release) -> None."""
    first = applied_upstream.split()[0] if applied_upstream.split() else ""
    return first.rstrip(",;") if release_key(first) else None


def native_release(patch) -> str | None:
    """The first release that has the patch's behaviour natively, from either header; None if none has."""
    for field in ("Applied-Upstream", "Superseded-Upstream"):
        since = native_from(patch.fields.get(field, ""))
        if since:
            return since
    return None


@dataclass
class Behaviours:
    native: list[tuple[str, str]]  # (reference patch name, release that ships it)
    added: list[str]  # patch names of the release's series
    missing: list[str]  # reference patches neither native nor carried (a series defect)


def behaviours(series: Series, root: Path | None = None) -> Behaviours:
    reference = series if series.version == REFERENCE_RELEASE else load_series(REFERENCE_RELEASE, root)
    carried = {p.name for p in series.patches}
    native, missing = [], []
    for patch in reference.patches:
        if patch.name in carried:
            continue
        since = native_release(patch)
        if since and release_key(since) <= release_key(series.version):
            native.append((patch.name, since))
        else:
            missing.append(patch.name)
    return Behaviours(native, [p.name for p in series.patches], missing)
