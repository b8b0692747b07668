"""``torch-overlay report --profile``: per-region forward and backward time and kernel count of a script's steps.

The times come from the scopes the series' ``kernel_annotations`` Inductor flag puts in the profiler events
(the format is fixed in the overlay's kernel-annotations interface): with the flag on, every kernel call and
extern call that came from annotated FX nodes (and, where the series adds them, every run of consecutive nodes
with one annotation in a graph that runs eagerly) runs inside ``torch.profiler.record_function(NAME, ARGS)`` with

    NAME = "annotation " + scope_label(custom) [+ " (backward)"]     e.g. "annotation layer=3, stage='attn'"

where :func:`scope_label` writes the annotation's items as ``key=value`` with no double quote and no backslash
(torch writes event names into the Chrome trace unescaped). A scope's name is matched to a region by rendering
each annotation the report captured with that same rule, not by parsing the name: a scope whose annotation the
report did not capture is counted under its own text.

Its parts, each usable alone:

- :func:`region_times`, a pure function from profiler events to per-region sums; it only reads names, times and
  the parent links of ``torch.profiler`` events, so it is tested on real profiles of scopes of that name;
- :func:`check_kernel_annotations`, the refusal, before the script runs, of a torch without the flag;
- :class:`ScriptProfiler`, which turns the flag on and profiles the script's run, paused while torch.compile
  compiles (:class:`CompilePause`), and writes the Chrome trace, any event name with a quote made valid JSON
  (:func:`quote_names`).

A region's time is the scopes' own time: each scope's span less the spans of the annotation scopes nested
directly in it (a regional Inductor graph's compiled region runs its kernels' scopes inside the eager scope
of the nodes around it), so no time is counted twice. It is not the profiler's "self" time, which would leave
out the aten ops an extern call's scope holds. Its kernel count is what its scopes ran, summed over the steps
the script ran (:func:`kernel_count`): one per kernel scope, one per op of an eager scope.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ..errors import OverlayError
from .model import Report, region_of

SCOPE_PREFIX = "annotation "
BACKWARD_SUFFIX = " (backward)"
FLAG = "kernel_annotations"
FLAG_ENV = "TORCHINDUCTOR_KERNEL_ANNOTATIONS"


# The same rule as scope_label in torch/_inductor/kernel_annotations.py (patch local-inductor-kernel-annotations,
# every release's copy): a change there is a change here.
def scope_label(custom: dict) -> str:
    """The text that names ``custom`` in a scope, after "annotation ": its items as ``key=value`` in the order of
    the keys' text, each value its JSON (``repr`` for what JSON cannot hold), every ``"`` written ``'`` and every
    backslash ``/``, a key's control characters as JSON escapes, characters beyond ASCII as they are (keys and
    values alike)."""
    items = sorted(custom.items(), key=lambda item: str(item[0]))
    text = ", ".join(f"{_key_text(k)}={_value_text(v)}" for k, v in items)
    return text.replace('"', "'").replace("\\", "/")


def _key_text(key) -> str:
    return "".join(c if c >= " " else json.dumps(c)[1:-1] for c in str(key))


def _value_text(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):  # a dict inside whose keys JSON cannot sort or hold, a value that holds itself
        return json.dumps(repr(value), ensure_ascii=False)


def parse_scope_name(name: str) -> Optional[tuple]:
    """(label, backward) of an annotation scope's event name: the text between "annotation " and the optional
    " (backward)"; None for any other event."""
    if not name.startswith(SCOPE_PREFIX):
        return None
    text = name[len(SCOPE_PREFIX):]
    backward = text.endswith(BACKWARD_SUFFIX)
    if backward:
        text = text[:-len(BACKWARD_SUFFIX)]
    return (text, backward) if text else None


def known_labels(report: Report) -> dict:
    """{scope label: annotation} of every annotation the report's captured graphs hold, first seen first (two
    annotations whose labels are one text, ``{1: 'a'}`` and ``{'1': 'a'}``, share a scope name: the first
    names it)."""
    labels: dict = {}
    for region in report.regions:
        for op in [op for _, op in region.forward] + [b.op for b in region.backward]:
            if op.custom:
                labels.setdefault(scope_label(op.custom), op.custom)
    return labels


@dataclass
class RegionTime:
    """One region's sums over the profiled run; times in microseconds."""
    key: str        # the scope label (scope_label of the annotation, or the scope's own text)
    custom: Optional[dict]  # the annotation, where the report captured one with that label
    forward_us: float = 0.0
    forward_kernels: int = 0
    backward_us: float = 0.0
    backward_kernels: int = 0

    @property
    def total_us(self) -> float:
        return self.forward_us + self.backward_us


def _span_us(event) -> float:
    return float(event.time_range.end - event.time_range.start)


def kernel_count(scope) -> int:
    """The kernels and ops one scope ran: its direct children that are op events (not ``record_function``
    scopes), at least one. A kernel scope holds one call: a C++ kernel records no event of its own, an extern
    call one op (``aten::mm``). An eager scope (a run of a graph that runs op by op: ``aot_eager``, the ops
    of a regional Inductor graph outside its compiled regions) holds one op event per op of the run."""
    ops = sum(1 for child in scope.cpu_children if not child.is_user_annotation)
    return max(ops, 1)


def region_times(events: Iterable, known: Optional[dict] = None) -> list:
    """Per-region sums of the annotation scopes among ``events`` (``torch.profiler`` FunctionEvents, as
    ``profile.events()`` gives them, their ``cpu_parent`` links set), regions in the order their first scope
    started. ``known`` ({label: annotation}, :func:`known_labels`) gives each region its annotation."""
    known = known or {}
    from torch.autograd import DeviceType

    scopes = []
    for event in events:
        if event.device_type != DeviceType.CPU:
            continue  # the copy of a scope a GPU's timeline shows (the CPU scope holds its launch)
        parsed = parse_scope_name(event.name)
        if parsed is not None:
            scopes.append((event, parsed))
    scope_ids = {id(event) for event, _ in scopes}
    nested_us: dict = {}
    for event, _ in scopes:
        parent = event.cpu_parent
        while parent is not None and id(parent) not in scope_ids:
            parent = parent.cpu_parent
        if parent is not None:
            nested_us[id(parent)] = nested_us.get(id(parent), 0.0) + _span_us(event)
    regions: dict = {}
    for event, (key, backward) in sorted(scopes, key=lambda s: s[0].time_range.start):
        region = regions.setdefault(key, RegionTime(key, known.get(key)))
        own = max(_span_us(event) - nested_us.get(id(event), 0.0), 0.0)
        if backward:
            region.backward_us += own
            region.backward_kernels += kernel_count(event)
        else:
            region.forward_us += own
            region.forward_kernels += kernel_count(event)
    return list(regions.values())


def page_names(times: list, report: Report) -> dict:
    """{scope label: the region's name on the page}: the report's name (``repr`` of the annotation) where the
    captured graphs have an annotation of that label, else the label itself."""
    names = {label: region_of(custom) for label, custom in known_labels(report).items()}
    return {t.key: names.get(t.key, t.key) for t in times}


@dataclass
class ProfilePage:
    """What the page shows of a profile: the regions' sums, their names on the page, the trace's file name."""
    times: list   # [RegionTime]
    names: dict   # {scope label: name on the page}
    trace: str    # the Chrome trace's file name, beside the page


def profile_page(events, report: Report, trace: str) -> ProfilePage:
    times = region_times(events, known_labels(report))
    return ProfilePage(times, page_names(times, report), trace)


def trace_path(page: Path) -> Path:
    """The Chrome trace beside the page: ``report.html`` -> ``report.trace.json``."""
    return page.with_name(f"{page.stem}.trace.json")


# A line a patch adds to torch/_inductor/config.py: the flag's definition.
_DEFINES_FLAG = re.compile(rf"^\+{FLAG}\s*(:[^=]*)?=", re.M)


def releases_with_flag() -> list:
    """The releases whose series carry a patch that defines the flag in Inductor's config, oldest first."""
    from ..series import default_patches_root, load_series, supported_versions

    root = default_patches_root()
    found = []
    for version in supported_versions(root):
        try:
            patches = load_series(version, root).patches
        except OverlayError:
            continue
        if any("torch/_inductor/config.py" in p.touched
               and _DEFINES_FLAG.search(p.path.read_text(encoding="utf-8", errors="replace")) for p in patches):
            found.append(version)
    return found


def check_kernel_annotations(torch) -> None:
    """Refuse, before the script runs, a torch whose Inductor has no ``kernel_annotations`` flag, saying why
    (no overlay applied, an applied series older than the flag, a release whose series has no such patch) and
    what to do."""
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config, FLAG):
        return
    from ..installation import base_version

    version = base_version(torch.__version__)
    what = f"torch {torch.__version__} has no torch._inductor.config.{FLAG}, the flag that names regions in profiler events"
    unchanged = "the script was not run; no report was written"
    with_flag = releases_with_flag()
    if version in with_flag:
        if "+overlay" in torch.__version__:  # a wheel torch-overlay rebuilt, installed with pip
            raise OverlayError(f"{what} (the wheel was built with an older series)", unchanged=unchanged,
                               todo="rebuild the wheel with the current series ('torch-overlay rebuild-wheel') "
                                    "and install it; then run the report again")
        from ..installation import TorchInstallation

        applied = TorchInstallation.of_running_interpreter().applied_state() is not None
        why = "an older series is applied" if applied else "the overlay is not applied"
        raise OverlayError(f"{what} ({why})", unchanged=unchanged,
                           todo="run 'torch-overlay status': it names the command that brings this torch to its "
                                "current series (which adds the flag); then run the report again")
    others = f"releases whose series add it: {', '.join(with_flag)}" if with_flag else \
        "no release's series adds it yet"
    raise OverlayError(f"{what}: the torch-overlay series for {version} does not add it ({others})",
                       unchanged=unchanged,
                       todo="run the report without --profile" + (
                           f", or install a release that has the flag ('pip install torch=={with_flag[-1]}', then "
                           "'torch-overlay apply')" if with_flag else ""))


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 for one call: torch's profiler prints "Toggling CPU activity with CUDA activity
    on may result in traces ..." on every toggle of a CPU-only profile (its condition does not look at the
    activities), twice per compilation here, and 2.13 "Requested callback is not found" when a toggled profile
    stops; neither says anything about the user's script."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class CompilePause:
    """Pauses ``profiler`` (a running ``torch.profiler.profile``) while torch.compile compiles: from each of
    Dynamo's compile-start callbacks to its compile-end callback (``torch._dynamo.callback_handler``, on every
    release). Compiling under the profiler records every fake op the tracers run: twenty times the events of the
    demo model's steps, and twice the run time."""

    def __init__(self, profiler, activities):
        self._profiler = profiler
        self._activities = activities
        self._depth = 0

    def _toggle(self, enable: bool) -> None:
        with _quiet_stderr():
            self._profiler.toggle_collection_dynamic(enable, self._activities)

    def _start(self, *args) -> None:  # 2.13 passes CallbackArgs, 2.5.1 nothing
        self._depth += 1
        if self._depth == 1:
            self._toggle(False)

    def _end(self, *args) -> None:
        if self._depth:
            self._depth -= 1
            if self._depth == 0:
                self._toggle(True)

    @contextlib.contextmanager
    def installed(self):
        import torch._dynamo

        handler = torch._dynamo.callback_handler
        handler.register_start_callback(self._start)
        handler.register_end_callback(self._end)
        try:
            yield self
        finally:
            handler.remove_start_callback(self._start)
            handler.remove_end_callback(self._end)
            if self._depth:  # a compilation that never ended
                self._depth = 0
                self._toggle(True)


class ScriptProfiler:
    """Profiles what the script runs, with the flag on, except while torch.compile compiles (:class:`CompilePause`).

    The steps of a script are whatever it runs outside its compilations: the profiler records from the script's
    start to its end. The first step's kernels run after its compilation ends, so every step's kernels are
    recorded. A script that profiles itself cannot be run under ``--profile`` (one profiler at a time)."""

    def __init__(self):
        self.events = None
        self._profiler = None

    @contextlib.contextmanager
    def running(self):
        import torch
        import torch._inductor.config as inductor_config
        from torch.profiler import ProfilerActivity, profile

        check_kernel_annotations(torch)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        saved_env = os.environ.get(FLAG_ENV)
        os.environ[FLAG_ENV] = "1"  # for any process the script starts
        prof = self._profiler = profile(activities=activities)
        try:
            with inductor_config.patch({FLAG: True}):
                prof.start()
                try:
                    with CompilePause(prof, activities).installed():
                        yield self
                finally:
                    with _quiet_stderr():  # 2.13: "Requested callback is not found", the toggles' doing
                        prof.stop()
        finally:
            if saved_env is None:
                os.environ.pop(FLAG_ENV, None)
            else:
                os.environ[FLAG_ENV] = saved_env
        self.events = prof.events()

    def export_chrome_trace(self, path: Path) -> None:
        """The profiler's Chrome trace at ``path``, every event name made valid JSON (:func:`quote_names`): the
        annotation scopes' names need nothing, a scope the script opens itself may hold a quote."""
        self._profiler.export_chrome_trace(str(path))
        names = {e.name for e in self.events if '"' in e.name or "\\" in e.name}
        text = path.read_text(encoding="utf-8")
        path.write_text(quote_names(text, names), encoding="utf-8")


def quote_names(trace: str, names: Iterable) -> str:
    """``trace`` (the text of a Chrome trace torch wrote) with each of ``names`` written as its JSON string.

    torch writes an event's name between quotes without escaping it: 2.5.1 and 2.13 as it is (backslashes
    turned into slashes), so a double quote in a name (a ``record_function`` scope of the script's own; the
    annotation scopes hold none) ends the string early and no JSON reader (Perfetto, chrome://tracing,
    json.load) opens the file; 2.15 turns its double quotes into single ones too, which reads, but is not the
    event's name. The names are known (the profile's own events): each is replaced where it stands quoted, in any
    of those forms, by its JSON string, so the trace names an event as the profiler does on every release;
    nothing else in the file changes."""
    for name in sorted(names):
        if '"' not in name and "\\" not in name:
            continue
        slashed = name.replace("\\", "/")
        for written in dict.fromkeys((name, slashed, name.replace('"', "'"), slashed.replace('"', "'"))):
            trace = trace.replace(f'"{written}"', json.dumps(name))
    return trace
