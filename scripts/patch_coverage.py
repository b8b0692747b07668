"""Which functions each patch of the installed release's series changes, and which of them no program of the
no-annotation corpus reaches.

    .venv/bin/python scripts/patch_coverage.py [--out bench/patch-coverage-X.md] [PROGRAM ...]

The no-annotation differential (test/differential/) can only see a difference a program makes happen: a patch
that changes a function no corpus program calls is unchecked there, whatever it does. This script makes the
corpus grow by construction rather than by the last finding:

1. For every patch of the series, its hunks under torch/ are applied in series order to the release's own files
   (the pristine bytes, verified against RECORD), and each changed line of the new side is mapped to the
   innermost ``def`` around it (its ``__qualname__``); a changed line outside any ``def`` (an import, a module
   constant, a class attribute) runs when its module is imported. The result must be the installed file byte
   for byte, so the mapping is that of the patched torch being measured.
2. The corpus programs (all of them unless named) run on the patched torch in a child interpreter with a
   ``sys.settrace`` hook that only records which code objects start (no line events), exactly as
   test/differential/differential_observe.py runs them for the differential.
3. Per patch, each changed function is reached (with the first program that reached it), allowed (in
   ``ALLOWED``: only an annotated program can reach it, with the reason), or a gap. Any gap, or a program
   that raised where it exists to run, makes the exit status 1.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIFFERENTIAL = REPO / "test" / "differential"

# (file, qualname) -> why no program that annotates nothing can reach it. A changed function of the list that a
# corpus program does reach is reported as reached (the entry is then unnecessary there, not wrong). The list
# serves every release: an entry no patch of the release changes is listed apart, never an error.
_ANNOTATE_API = "the annotating API itself: a program that calls it annotates"
_DYNAMO_ANNOTATE = ("Dynamo's variable for annotate (and what reads its dict): made only when compiled code "
                    "enters annotate or calls a function decorated with it")
_CALLER_ANNOTATION = ("runs only with torch._dynamo.config.trace_under_caller_annotation=True (opt-in, a config "
                      "the pristine release lacks) for a compiled call inside an eager annotate block")
_NEW_PRIVATE_API = ("a private helper of upstream's API that the pristine release lacks and nothing in torch calls "
                    "(a program calling it cannot run on the pristine release; its tests are the patch's)")
_TRITON_ONLY = ("a Triton kernel's call site (local-inductor-kernel-annotations wraps it in the kernel_call the C++ "
                "kernels' flush shares, which the corpus reaches): Inductor generates Triton kernels on a GPU only, "
                "and the corpus runs on CPU")
_KERNEL_ANNOTATIONS_ON = ("runs only with torch._inductor.config.kernel_annotations on (off by default; the "
                          "pristine release has no such option): kernel_call returns before it when the option "
                          "is off (local-inductor-kernel-annotations)")
_KERNEL_ANNOTATIONS_ON_EAGER = ("runs only with torch._inductor.config.kernel_annotations on (off by default; the "
                                "pristine release has no such option): the aot_eager backends' compiler and regional_inductor call it only "
                                "then (local-eager-annotation-scopes)")
_ANNOTATED_BODY = ("runs only for a higher-order op's body graph whose nodes carry custom (an annotate() block "
                   "Dynamo traced in a torch.cond branch), re-traced without preserve_node_meta() "
                   "(local-export-nonstrict-custom)")
ALLOWED: dict[tuple[str, str], str] = {
    ("torch/fx/traceback.py", "annotate"): _ANNOTATE_API,
    ("torch/fx/traceback.py", "annotate_fn"): _ANNOTATE_API,
    ("torch/fx/traceback.py", "annotate_fn.<locals>.decorator"): _ANNOTATE_API,
    ("torch/fx/traceback.py", "annotate_fn.<locals>.decorator.<locals>.annotated"): _ANNOTATE_API,
    ("torch/autograd/graph.py", "region_activation_memory_budget"):
        "the memory-budget annotation (an annotate block with the budget key): " + _ANNOTATE_API,
    ("torch/fx/traceback.py", "_get_custom_metadata"): _NEW_PRIVATE_API,
    ("torch/fx/traceback.py", "_get_custom_metadata.<locals>.entries"): _NEW_PRIVATE_API,
    ("torch/fx/traceback.py", "_get_ordered_seq_nr_groups"): _NEW_PRIVATE_API,
    ("torch/fx/traceback.py", "_set_autograd_backward"): _NEW_PRIVATE_API,
    ("torch/fx/traceback.py", "_preserve_node_seq_nr"):
        "entered by aot_export_module(trace_joint=True) only for a joint graph that carries an annotation "
        "(local-aot-export-joint-meta), and by nothing else in torch before upstream 2.11",
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.__init__"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.enter"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.exit"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.enter.<locals>.leave_block"):
        _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.module_name"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.fn_name"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.python_type"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.reconstruct_type"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable._reentered_after_a_break"):
        "called only by reconstruct_type, at a graph break inside an annotate block: " + _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.clone"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "FxTracebackAnnotateVariable.create"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_from_variable"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_from_set"):
        "called only by _annotation_from_variable, for a set given to annotate(): " + _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_is_sequence_of_pairs"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_as_dict"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_dict"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_key_path"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_not_constant"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_constant_annotation"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_value"): _DYNAMO_ANNOTATE,
    ("torch/_dynamo/variables/functions.py", "_recreate_supported_context_manager.<locals>.attr"):
        "reads the decorator's arguments of annotate's ContextDecorator wrapper only: " + _DYNAMO_ANNOTATE,
    ("torch/_dynamo/guards.py", "GuardBuilder.FX_TRACEBACK_ANNOTATION"): _CALLER_ANNOTATION,
    ("torch/_dynamo/guards.py", "GuardBuilder.FX_TRACEBACK_ANNOTATION.<locals>.matches"): _CALLER_ANNOTATION,
    ("torch/_dynamo/guards.py", "GuardBuilder.FX_TRACEBACK_ANNOTATION.<locals>.fn"): _CALLER_ANNOTATION,
    ("torch/_dynamo/variables/ctx_manager.py", "_ambient_annotation"): _CALLER_ANNOTATION,
    ("torch/_dynamo/variables/ctx_manager.py", "_ambient_annotation_is"): _CALLER_ANNOTATION,
    ("torch/_dynamo/variables/ctx_manager.py", "_annotation_repr"): _CALLER_ANNOTATION,
    ("torch/_dynamo/variables/ctx_manager.py", "_caller_annotation_hidden"): _CALLER_ANNOTATION,
    ("torch/fx/passes/regional_inductor.py", "regional_inductor"):
        "upstream's regional Inductor pass (2.10+), which a program runs only to compile the nodes it annotates "
        "compile_with_inductor (local-eager-annotation-scopes adds the eager ops' scopes, with "
        "kernel_annotations on, after the regions are compiled)",
    ("torch/fx/passes/regional_inductor.py", "_RegionScooper.scoop_regions"):
        "upstream's regional Inductor pass (2.10+), which a program runs only to compile the nodes it annotates "
        "compile_with_inductor (local-regional-inductor-linear-partitions changes its grouping)",
    # a module-level class, used only while exporting
    ("torch/_higher_order_ops/utils.py", "_AnnotatingInterpreter.__init__"): _ANNOTATED_BODY,
    ("torch/_higher_order_ops/utils.py", "_AnnotatingInterpreter.run_node"): _ANNOTATED_BODY,
    ("torch/fx/traceback.py", "_ActiveAnnotateBlocks.__init__"):
        "runs once, when torch.fx.traceback is imported (the module's one instance), before any program starts",
    **{("torch/_inductor/kernel_annotations.py", name): _KERNEL_ANNOTATIONS_ON for name in (
        "annotation_json", "annotated_origins", "_graph_order", "annotation_texts", "scope_name", "scope_label",
        "_key_text", "_value_text", "_is_backward", "_is_backward_graph", "_json_text", "_json_key",
        "_ScopeEnter.__init__", "_ScopeEnter.codegen",
        "_ScopeExit.__init__", "_ScopeExit.codegen", "_origins_of", "_annotated", "_keyed", "_runs_python",
        "_fx_wrapper_class",
        "_write_comment", "cache_key_annotations")},
    **{("torch/_inductor/eager_annotation_scopes.py", name): _KERNEL_ANNOTATIONS_ON_EAGER for name in (
        "add_eager_scopes", "_scope_name", "_does_no_work", "_close_scopes_on_error", "kept_by_boxed_codegen",
        "ops_filter_with_scopes", "ScopeClosingInterpreter.run")},
    # aot_eager's compiler with the scopes on, on the releases whose boxed_nop runs an fx.Interpreter (2.5.1-2.9.1)
    ("torch/_dynamo/backends/debugging.py", "_boxed_nop_with_eager_scopes.<locals>.run_closing_scopes"):
        _KERNEL_ANNOTATIONS_ON_EAGER,
    # The call sites of Triton kernels (the same kernel_call as the C++ kernels' flush, which the corpus reaches):
    # the corpus runs on CPU, where Inductor generates C++ kernels only.
    **{("torch/_inductor/codegen/simd.py", name): _TRITON_ONLY for name in (
        "SIMDScheduling.codegen_node_schedule", "SIMDScheduling.codegen_template",
        "SIMDScheduling._codegen_mix_order_reduction")},
    ("torch/_inductor/codegen/cpp.py", "CppScheduling.codegen_template"):
        "the C++ GEMM template's call site (the same kernel_call as the C++ kernels' flush, which the corpus "
        "reaches): Inductor picks the template only under max_autotune with the CPP GEMM backend, which times "
        "candidate kernels (no corpus program autotunes)",
}

# file -> (first release where a program reaches it, why not before): a whole file that cannot be reached on
# the releases below it.
ALLOWED_BEFORE: dict[str, tuple[str, str]] = {
    "torch/fx/passes/infra/_linear_partitioner.py": (
        "9999.0.0", "the series' own new module (README row 'linear partitioner module'): only regional_inductor "
                    "imports it, and regional Inductor groups only the nodes annotated compile_with_inductor"),
    "torch/_inductor/eager_annotation_scopes.py": (
        "9999.0.0", "the series' own new module (README row 'eager annotation scopes module'): aot_eager and "
                    "regional Inductor import it only with torch._inductor.config.kernel_annotations on"),
    "torch/fx/passes/regional_inductor.py": (
        "2.10.0", "a module the pristine release lacks before upstream 2.10 (README row 'new modules'): nothing in "
                  "torch imports it, and a program importing it cannot run on the pristine release"),
}

MODULE_LEVEL = "<module level>"


@dataclass
class Hunk:
    old_start: int
    lines: list[str]  # each with its ' ', '-' or '+' marker


@dataclass
class FileDiff:
    path: str
    new_file: bool
    hunks: list[Hunk] = field(default_factory=list)


_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_diff(text: str) -> list[FileDiff]:
    """The file diffs of a git format-patch text (only what applying them needs)."""
    files: list[FileDiff] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _DIFF.match(lines[i])
        if not m:
            i += 1
            continue
        fd = FileDiff(m.group(2), False)
        files.append(fd)
        i += 1
        while i < len(lines) and not lines[i].startswith("@@") and not _DIFF.match(lines[i]):
            fd.new_file |= lines[i].startswith("new file mode")
            i += 1
        while i < len(lines) and lines[i].startswith("@@"):
            h = _HUNK.match(lines[i])
            old_len = int(h.group(2) or 1) if h.group(2) != "0" else 0
            new_len = int(h.group(4) or 1) if h.group(4) != "0" else 0
            hunk = Hunk(int(h.group(1)), [])
            i += 1
            seen_old = seen_new = 0
            while seen_old < old_len or seen_new < new_len:
                line = lines[i]
                i += 1
                if line.startswith("\\"):
                    continue
                line = line or " "  # an empty context line may have lost its space
                hunk.lines.append(line)
                seen_old += line[0] in " -"
                seen_new += line[0] in " +"
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
            fd.hunks.append(hunk)
    return files


def apply_hunks(old: list[str], fd: FileDiff, where: str) -> tuple[list[str], list[int]]:
    """(new lines, 1-based new-side numbers of the changed lines): '+' lines, and for a place where lines were
    only removed, the line that follows the removal."""
    new: list[str] = []
    changed: list[int] = []
    pos = 0  # next old line (0-based) not yet copied
    for hunk in fd.hunks:
        start = max(hunk.old_start - 1, 0) if any(l[0] in " -" for l in hunk.lines) else hunk.old_start
        # As git apply does, a hunk whose lines moved (a patch stored once for several releases) applies at the
        # nearest place its old lines match.
        block = [l[1:] for l in hunk.lines if l[0] in " -"]
        if block and old[start:start + len(block)] != block:
            places = [i for i in range(pos, len(old) - len(block) + 1) if old[i:i + len(block)] == block]
            if places:
                start = min(places, key=lambda i: abs(i - start))
        if start < pos:
            raise SystemExit(f"patch_coverage: overlapping hunks in {where}")
        new += old[pos:start]
        pos = start
        removed_here = False
        for line in hunk.lines:
            marker, body = line[0], line[1:]
            if marker in " -":
                if pos >= len(old) or old[pos] != body:
                    raise SystemExit(f"patch_coverage: {where} does not apply at line {pos + 1} of "
                                     f"{fd.path} ({old[pos] if pos < len(old) else 'end of file'!r} != {body!r})")
                pos += 1
            if marker == " ":
                if removed_here:
                    changed.append(len(new) + 1)
                    removed_here = False
                new.append(body)
            elif marker == "+":
                new.append(body)
                changed.append(len(new))
                removed_here = False
            else:
                removed_here = True
        if removed_here:
            changed.append(len(new) + 1)
    new += old[pos:]
    return new, changed


def enclosing_defs(source: str) -> list[tuple[int, int, str]]:
    """(first line with decorators, last line, __qualname__) of every def and lambda-free function."""
    out: list[tuple[int, int, str]] = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((first, child.end_lineno, qual))
                visit(child, qual + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def innermost(defs, line: int) -> str:
    around = [(last - first, qual) for first, last, qual in defs if first <= line <= last]
    return min(around)[1] if around else MODULE_LEVEL


def changed_functions(release: str) -> tuple[dict[str, dict[tuple[str, str], None]], list[str]]:
    """({patch name: {(file, qualname): None}}, the touched torch files), from the series and the installed
    torch, whose pristine bytes come from the saved originals (verified against RECORD)."""
    from torch_overlay.installation import TorchInstallation
    from torch_overlay.pristine import MissingReleaseFile, from_installation
    from torch_overlay.series import load_series

    inst = TorchInstallation.of_running_interpreter()
    pristine = from_installation(inst, release)
    series = load_series(release)
    state: dict[str, list[str]] = {}
    per_patch: dict[str, dict[tuple[str, str], None]] = {}
    for patch in series.patches:
        name = patch.name.removesuffix(".patch")
        found = per_patch.setdefault(name, {})
        for fd in parse_diff(patch.path.read_text()):
            if not fd.path.startswith("torch/"):
                continue  # upstream's test tree: not installed
            if fd.path not in state:
                try:
                    state[fd.path] = ("" if fd.new_file else pristine(fd.path).decode()).split("\n")
                except MissingReleaseFile:
                    state[fd.path] = [""]
            state[fd.path], lines = apply_hunks(state[fd.path], fd, patch.name)
            if not fd.path.endswith(".py"):
                continue
            defs = enclosing_defs("\n".join(state[fd.path]))
            for line in lines:
                text = state[fd.path][line - 1].strip() if line <= len(state[fd.path]) else ""
                if not text or text.startswith("#"):
                    continue  # a blank or comment line runs nothing
                found[(fd.path, innermost(defs, line))] = None
    for path, lines in state.items():
        installed = (inst.site / path).read_text()
        if installed != "\n".join(lines):
            raise SystemExit(f"patch_coverage: {path} of the installed torch is not the series applied to the "
                             f"release's file; run 'torch-overlay apply' (or scripts/setup.sh) first")
    return per_patch, list(state)


# --- the child: run the corpus with a call tracer -----------------------------------------------------------

def child(out: Path, targets_file: Path, programs: list[str]) -> int:
    import threading

    sys.path.insert(0, str(DIFFERENTIAL))
    targets = {tuple(t) for t in json.loads(targets_file.read_text())}
    wanted_files = {f for f, _ in targets}
    reached: dict[str, str] = {}  # "file::qualname" -> first program
    current = ["<import>"]
    # By id, each code object kept alive so that its id is not reused: a code object Dynamo generates may hold a
    # dict among its constants, which makes it unhashable.
    seen_codes: dict[int, object] = {}

    def tracer(frame, event, arg):
        code = frame.f_code
        if id(code) in seen_codes:
            return None
        seen_codes[id(code)] = code
        filename = code.co_filename
        cut = filename.rfind("/torch/")
        if cut >= 0:
            rel = filename[cut + 1:]
            if rel in wanted_files:
                key = f"{rel}::{code.co_qualname}"
                reached.setdefault(key, current[0])
        return None

    import differential_observe
    import no_annotation_corpus

    # A helper that annotates on purpose (to check what is compiled after it) is not traced: what it reaches is
    # reached by an annotated program.
    def untraced(helper):
        def run(*args, **kwargs):
            sys.settrace(None)
            threading.settrace(None)
            try:
                return helper(*args, **kwargs)
            finally:
                sys.settrace(tracer)
                threading.settrace(tracer)
        return run

    for name in no_annotation_corpus.ANNOTATING_HELPERS:
        setattr(no_annotation_corpus, name, untraced(getattr(no_annotation_corpus, name)))
    sys.settrace(tracer)
    threading.settrace(tracer)

    norm = differential_observe.Normaliser([])
    errors = {}
    timings = {}
    lost = []
    for name in programs:
        current[0] = name
        seen_codes.clear()  # per program, so each program's reach is complete
        sys.settrace(tracer)
        threading.settrace(tracer)
        start = time.monotonic()
        record = differential_observe.run_program(name, norm)
        if sys.gettrace() is not tracer:
            lost.append(name)
        timings[name] = round(time.monotonic() - start, 1)
        if record["error"] and not no_annotation_corpus.PROGRAMS[name].raises:
            errors[name] = record["error"]
    sys.settrace(None)
    threading.settrace(None)
    imported = sorted({f for f in wanted_files
                       if f.removesuffix(".py").replace("/", ".").removesuffix(".__init__") in sys.modules})
    out.write_text(json.dumps({"reached": reached, "imported": imported, "errors": errors, "seconds": timings,
                               "trace_lost": lost}))
    return 0


# --- the report ---------------------------------------------------------------------------------------------

def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("+")[0].split(".")[:3])


def run(programs: list[str], out: Path | None, ci: bool = False) -> int:
    import torch

    sys.path.insert(0, str(DIFFERENTIAL))
    from no_annotation_corpus import PROGRAMS

    release = torch.__version__.split("+")[0]
    start = time.monotonic()
    per_patch, _ = changed_functions(release)
    targets = sorted({t for found in per_patch.values() for t in found})
    programs = programs or list(PROGRAMS)
    with tempfile.TemporaryDirectory() as tmp:
        tfile, ofile = Path(tmp) / "targets.json", Path(tmp) / "reached.json"
        tfile.write_text(json.dumps(targets))
        # An empty Inductor cache of its own, as each side of the differential has: a warm one would skip the
        # lowering the programs exist to reach.
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor-cache"))
        proc = subprocess.run([sys.executable, __file__, "--child", str(ofile), str(tfile), *programs],
                              cwd=str(DIFFERENTIAL), capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"patch_coverage: the corpus run failed ({proc.returncode})")
        child_out = json.loads(ofile.read_text())
    reached, imported = child_out["reached"], set(child_out["imported"])
    seconds = time.monotonic() - start

    rows, gaps, allowed_used = [], [], set()
    for patch, found in per_patch.items():
        for path, qual in found:
            key = (path, qual)
            if qual == MODULE_LEVEL and path in imported:
                how = "imported"
            elif f"{path}::{qual}" in reached:
                how = f"reached by {reached[f'{path}::{qual}']}"
            elif key in ALLOWED:
                how = f"allowed: {ALLOWED[key]}"
                allowed_used.add(key)
            elif path in ALLOWED_BEFORE and _release(release) < _release(ALLOWED_BEFORE[path][0]):
                how = f"allowed before {ALLOWED_BEFORE[path][0]}: {ALLOWED_BEFORE[path][1]}"
                allowed_used.add(key)
            else:
                how = "GAP: module never imported" if qual == MODULE_LEVEL else "GAP: no program reaches it"
            if how.startswith("GAP"):
                gaps.append((patch, path, qual))
            rows.append((patch, path, qual, how))
    changed = {(p, q) for found in per_patch.values() for p, q in found}
    # An entry can be for another release's series (ALLOWED serves all of them): only listed, never a failure.
    unused = sorted(k for k in ALLOWED if k not in changed)

    lines = [f"# Patch coverage of the no-annotation corpus, torch {release}", "",
             f"{len(per_patch)} patches, {len(changed)} changed functions (and module-level changes), "
             f"{len(programs)} programs, {seconds:.0f} s. Command: `.venv/bin/python scripts/patch_coverage.py "
             f"{'--ci ' if ci else ''}--out bench/patch-coverage-{release}.md`"
             f"{' (--ci: the programs without third-party packages, as CI runs it)' if ci else ''}.", "",
             f"Gaps: {len(gaps)}. Allowed (annotated programs only): {len(allowed_used)}. "
             f"Allow-list entries no patch of this release changes: {len(unused)}.", "",
             "| patch | file | function | reached |", "|---|---|---|---|"]
    lines += [f"| {p} | {f} | `{q}` | {h} |" for p, f, q, h in rows]
    if unused:
        lines += ["", "## Allow-list entries for other releases (no patch of this one changes them)", ""]
        lines += [f"- {f}: `{q}`" for f, q in unused]
    if child_out["trace_lost"]:
        lines += ["", "## Programs that removed the call tracer (set again before the next one)", ""]
        lines += [f"- {n}" for n in child_out["trace_lost"]]
    if child_out["errors"]:
        lines += ["", "## Programs that raised (their reach is partial)", ""]
        lines += [f"- {n}: {e.splitlines()[0][:200]}" for n, e in child_out["errors"].items()]
    lines += ["", "## Seconds per program (traced)", "", ", ".join(f"{n} {s}" for n, s in child_out["seconds"].items())]
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    print(text)
    for patch, path, qual in gaps:
        print(f"patch_coverage: gap: {patch} changes {path} {qual}, which no program of the no-annotation "
              f"corpus reaches: add a program that does (test/differential/no_annotation_corpus.py), or an "
              f"ALLOWED entry saying why only an annotated program can", file=sys.stderr)
    return 1 if gaps or child_out["errors"] else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(Path(argv[1]), Path(argv[2]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help="corpus programs (default: all)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--ci", action="store_true",
                        help="the programs without third-party packages only (HF transformers and timm take "
                             "about two thirds of the time and reach no changed function the others do not)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    programs = args.programs
    if args.ci:
        sys.path.insert(0, str(DIFFERENTIAL))
        from no_annotation_corpus import PROGRAMS

        programs = [name for name, p in PROGRAMS.items() if not p.needs]
    return run(programs, args.out, args.ci)


if __name__ == "__main__":
    sys.exit(main())
