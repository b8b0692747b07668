"""The oracle's outputs, kept for the rest of a CI run (build/oracle-cache).

The upstream oracle is one interpreter (.venv-oracle, torch 2.13.0+cpu) whatever release .venv holds, and the
programs the tests give it read nothing of that release: what it prints is a function of the oracle, the
command line, the stdin and the repository's test sources. CI (.ci/run) tests eleven releases against it in
turn, so it ran each oracle program eleven times for one answer. The first release's run keeps each answer
under a key made of all of those (the oracle's torch version file, the command, the stdin, the TORCH* variables
of the environment, and a digest of every file under test/, torch_overlay/ and patches/); the later ones read it. The
side under test runs in full on every release; only the oracle's answer is reused, and only for calls made
through oracle_interpreter.oracle_json or fuzz_run (programs that write no file). .ci/run empties the cache
when it starts, so every answer a CI run compares with comes from that run. TORCH_OVERLAY_ORACLE_CACHE=0 turns
it off (every call runs the oracle).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "build" / "oracle-cache"


@functools.cache
def sources_digest() -> str:
    """A digest of every file under test/, torch_overlay/ and patches/ (the programs, what they import, and
    the series, which no oracle program should read but which a later edit must not find answered from before)."""
    h = hashlib.sha256()
    for root in (REPO / "test", REPO / "torch_overlay", REPO / "patches"):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def oracle_identity(python: Path) -> str:
    """The oracle interpreter's path and its torch's version file (which names the build)."""
    venv = Path(python).absolute().parents[1]  # not resolved: bin/python links to the base interpreter
    versions = sorted(venv.glob("lib/python3*/site-packages/torch/version.py"))
    return str(venv) + "\0" + "".join(v.read_text() for v in versions)


def key(python: Path, args: list[str], stdin: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k.startswith("TORCH")}
    text = json.dumps([oracle_identity(python), args, stdin, sorted(env.items()), sources_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


def enabled() -> bool:
    return os.environ.get("TORCH_OVERLAY_ORACLE_CACHE", "1") != "0"


def cached_text(python: Path, args: list[str], stdin: str | None = None) -> str | None:
    """What a run of ``args`` kept, or None (none did, or the cache is off)."""
    path = CACHE / key(python, args, stdin)
    return path.read_text() if enabled() and path.exists() else None


def keep_text(python: Path, args: list[str], text: str, stdin: str | None = None) -> None:
    """Keep ``text``, the output of a run of ``args`` that succeeded (written whole or not at all)."""
    if not enabled():
        return
    path = CACHE / key(python, args, stdin)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def cached_stdout(python: Path, args: list[str], stdin: str | None, run) -> str:
    """``run()``'s output (the oracle's stdout for ``args``), from the cache when a run kept it."""
    out = cached_text(python, args, stdin)
    if out is None:
        out = run()
        keep_text(python, args, out, stdin)
    return out
