"""``torch-overlay report SCRIPT.py [args...] -o report.html``: the annotation report of a user's script.

Runs the script unchanged in this interpreter (as ``python SCRIPT.py args...`` would:
``__main__``, ``sys.argv``, the script's folder first on ``sys.path``), captures
every graph torch.compile hands to AOTAutograd (capture.py), and writes one
self-contained HTML page (html.py). Under torchrun each rank writes its own
page, ``report.rank<N>.html``. A line on stderr per captured graph shows progress
through long compiles. With ``--profile`` the script runs under the profiler with
Inductor's kernel_annotations flag on (profile.py): the page adds per-region times and
the Chrome trace is written beside it (``report.trace.json``).
"""
from __future__ import annotations

import contextlib
import os
import runpy
import sys
from pathlib import Path

from ..errors import OverlayError, check_output_location

def split_trailing_options(script_args: list, output: str, fail_on_unannotated: bool, profile: bool = False):
    """(script args, output, fail_on_unannotated, profile) with the report's own options peeled off
    the end of ``script_args``, where the usage line puts them
    (``SCRIPT.py a b -o report.html``); options before SCRIPT.py are argparse's."""
    args = list(script_args)
    while args:
        if len(args) >= 2 and args[-2] in ("-o", "--output"):
            output = args[-1]
            del args[-2:]
        elif args[-1].startswith("--output="):
            output = args.pop().split("=", 1)[1]
        elif args[-1] == "--fail-on-unannotated":
            fail_on_unannotated = True
            args.pop()
        elif args[-1] == "--profile":
            profile = True
            args.pop()
        else:
            break
    return args, output, fail_on_unannotated, profile


def rank_info():
    """(rank, world size) under torchrun, else (None, 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = os.environ.get("RANK")
    return (int(rank) if rank is not None and world > 1 else None), world


def output_path(output: str, rank) -> Path:
    path = Path(output)
    return path if rank is None else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def _progress(prefix: str):
    def show(graph) -> None:
        annotated = sum(1 for op in graph.ops if op.custom)
        print(f"{prefix}captured {graph.kind} graph {graph.index} (compilation {graph.compile_index}): "
              f"{len(graph.ops)} ops, {annotated} annotated", file=sys.stderr, flush=True)
    return show


def run_script(script: Path, args: list) -> int:
    """Run ``script`` as __main__ with ``args``; its exit status (0 when it returns)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def main(args) -> str:
    from .capture import GraphCapture
    from .html import render
    from .model import build_report

    script_args, output, fail_on_unannotated, profile = split_trailing_options(
        args.args, args.output, args.fail_on_unannotated, args.profile)
    script = Path(args.script)
    if not script.is_file():
        raise OverlayError(f"cannot run {script}: no such file", unchanged="no report was written",
                           todo="give the path of the Python script that calls torch.compile")
    rank, world = rank_info()
    prefix = "report: " if rank is None else f"report [rank {rank}/{world}]: "
    out = output_path(output, rank)
    check_output_location(out, "the report", unchanged="the script was not run; no report was written")

    import torch

    profiler = None
    if profile:
        from .profile import ScriptProfiler, check_kernel_annotations

        check_kernel_annotations(torch)
        profiler = ScriptProfiler()
    capture = GraphCapture(_progress(prefix))
    with capture.installed(), (profiler.running() if profiler else contextlib.nullcontext()):
        status = run_script(script, script_args)
    report = build_report(capture.graphs)
    details = [f"command: {' '.join([str(script), *script_args])}", f"torch {torch.__version__}"]
    if rank is not None:
        details.append(f"rank {rank} of {world}")
    if status:
        details.append(f"the script exited with status {status}; the report shows what was captured until then")
    out.parent.mkdir(parents=True, exist_ok=True)
    timing = None
    if profiler:
        from .profile import profile_page, trace_path

        trace = trace_path(out)
        profiler.export_chrome_trace(trace)
        timing = profile_page(profiler.events, report, trace.name)
    out.write_text(render(report, title=f"torch-overlay report: {script.name}", details=details, profile=timing),
                   encoding="utf-8")

    missing = report.unannotated_backward
    lines = [f"{prefix}wrote {out}: {len(capture.graphs)} graphs, {len(report.backward)} backward ops, "
             f"{len(missing)} without an annotation"]
    if timing:
        lines.append(f"{prefix}wrote {trace}: {sum(t.forward_kernels + t.backward_kernels for t in timing.times)} "
                     f"annotated kernel calls in {len(timing.times)} regions")
    if not capture.graphs:
        lines.append(f"{prefix}no graph was captured: the script compiled nothing through an AOTAutograd "
                     "backend (torch.compile's default inductor, aot_eager, or aot_autograd(...))")
    if fail_on_unannotated and missing:
        lines.append(f"{prefix}backward ops without an annotation:")
        lines += [f"  backward graph {b.graph.index}: {b.op.qualified_name} ({b.op.target})"
                  + (f", forward op {b.forward[1].qualified_name}" if b.forward else "") for b in missing]
    print("\n".join(lines), file=sys.stderr if status or (fail_on_unannotated and missing) else sys.stdout)
    if status:
        raise SystemExit(status)
    if fail_on_unannotated and missing:
        raise SystemExit(1)
    return ""
