#!/usr/bin/env python3
"""PyTorch 2.6.0's own test suite as a gate: the same tests on pristine and on patched torch, compared per test.

The promise of the overlay is that a program which does not annotate behaves exactly as on the pristine
release. PyTorch's own tests pin graphs, node names and metadata of the paths the series touches, so a test
that passes on the pristine release and fails once the series is applied is a regression.

What it does (everything it writes lives under build/upstream-suite/, except the results and the download):
  1. fetches Debian's source package of PyTorch 2.6.0 (trixie, 2.6.0+dfsg: the upstream tree with test/)
     with ``apt-get source`` under a private apt configuration, so the system's apt set-up is left alone
     (scripts/debian_source.py; the download is kept in build/debian-pytorch/), and unpacks its test/ folder
     and pytest.ini once (cached);
  2. installs pytest 7.3.2 into a folder of its own (2.6's conftest uses a hook argument that later pytest
     removed) and puts it first on PYTHONPATH for the test runs; .venv's own pytest is left as it is;
  3. builds libtorchbind_test.so from test/cpp/jit with g++ when a chosen file needs it (TestFX);
  4. runs the chosen tests with .venv's torch reverted (pristine, through ``torch-overlay revert``) and then
     applied again (patched), in the same order, writing junit XML for both;
  5. compares the two per test and writes the table (compare.tsv) and the figures (summary.json) into the
     results folder, bench/upstream-suite/<slice> by default (junit XML and pytest output stay in
     build/upstream-suite/runs/<slice>); exits 1 when a test passes on pristine and fails on patched, unless
     KNOWN_UPSTREAM_UPDATES names it with the exact rows its expected output changes in.

  usage: .venv/bin/python scripts/upstream_suite.py [--slice issue|ci|broad] [--results DIR] [pytest node ids]

.venv must hold torch 2.6.0 with the series applied (``bash scripts/setup.sh --torch 2.6.0``); it is left that
way (re-applied) whatever happens.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import debian_source  # scripts/debian_source.py: the Debian source package, shared with the apply-source test

REPO = Path(__file__).resolve().parents[1]
RELEASE = debian_source.RELEASE
WORK = REPO / "build" / "upstream-suite"
SOURCE_ROOT = WORK / "src"
PYTEST_DIR = WORK / "pytest-7.3.2"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
OVERLAY = REPO / ".venv" / "bin" / "torch-overlay"

# Tests that fail on patched torch because a backported upstream PR changed the expected output itself: the
# backport carries upstream's test update (named in the patch's Description), so they are no regression.
KNOWN_UPSTREAM_UPDATES = {
    "test/dynamo/test_aot_autograd.py::AotAutogradFallbackTests::test_aot_sequence_nr": {
        "why": "164174-fwd-bw-custom (its Description says so): backward nodes are those traced under the "
               "is_backward tag, and a gradient-accumulation add pairs with no forward node; upstream's expected "
               "table has both rows.",
        # the expected-output diff must be exactly these rows, else it is a regression after all
        "diff": ["- 4|aten.view.default||", "+ 4|aten.view.default||flatten",
                 "- 11|aten.add.Tensor||l__self___loss_fn", "+ 11|aten.add.Tensor||"],
    },
}

# The test selections. "issue": the three tests of issue 20 item 12. "ci": what runs in CI (about 10 minutes
# on a 2-core machine, both runs together). "broad": the annotation-relevant files, for a longer run.
ISSUE_TESTS = [
    "test/functorch/test_aotdispatch.py::TestAOTAutograd::test_input_mutation_aliases_and_output_alias",
    "test/functorch/test_aotdispatch.py::TestAOTAutograd::test_input_mutation_aliases_bases_out_of_order",
    "test/dynamo/test_aot_autograd.py::AotAutogradFallbackTests::test_aot_sequence_nr",
]
SLICES: dict[str, list[list[str]]] = {
    "issue": [ISSUE_TESTS],
    "ci": [
        ["test/functorch/test_aotdispatch.py::TestAOTAutograd", "test/functorch/test_aotdispatch.py::TestAOTExport",
         "test/functorch/test_aotdispatch.py::TestPartitioning", "test/functorch/test_aotdispatch.py::TestAOTDispatch",
         "test/functorch/test_aotdispatch.py::TestAOTModuleSimplified"],
        ["test/dynamo/test_aot_autograd.py"],
        ["test/fx/test_fx_traceback.py", "test/fx/test_fx_node_hook.py", "test/fx/test_dce_pass.py",
         "test/fx/test_fx_param_shape_control_flow.py", "test/fx/test_subgraph_rewriter.py"],
    ],
    "broad": [
        ["test/functorch/test_aotdispatch.py", "-k", "not TestEagerFusionOpInfo and not TestEagerFusionModuleInfo"],
        ["test/dynamo/test_aot_autograd.py"],
        ["test/test_fx.py"],
        ["test/fx"],
        ["test/functorch/test_control_flow.py"],
        ["test/export/test_export.py"],
        ["test/export/test_serialize.py"],
        ["test/dynamo/test_repros.py"],
    ],
}
NEEDS_TORCHBIND = ("test/test_fx.py", "test/export")  # their setUp loads libtorchbind_test.so


def say(message: str) -> None:
    print(f"== {message}", flush=True)


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


# ---------------------------------------------------------------------------------------------- the source


def fetch_source() -> Path:
    """PyTorch 2.6.0's tree (test/ and pytest.ini only), from Debian's source package; cached."""
    done = SOURCE_ROOT / "unpacked"
    if done.exists():
        return Path(done.read_text().strip())
    orig = debian_source.orig_tarball(say=say)
    say(f"unpacking test/ and pytest.ini of {orig.name}")
    tree = debian_source.unpack(orig, SOURCE_ROOT, "*/test/*", "*/pytest.ini")
    done.write_text(f"{tree}\n")
    return tree


# ---------------------------------------------------------------------------------------------- the tools


def install_pytest_732() -> None:
    """pytest 7.3.2 (2.6's conftest needs it) and hypothesis (some tests draw from it) in a folder of their own;
    .venv keeps its pytest."""
    if (PYTEST_DIR / "pytest").exists():
        return
    say(f"pip install --target {PYTEST_DIR} pytest==7.3.2")
    run([VENV_PYTHON, "-m", "pip", "install", "-q", "--target", PYTEST_DIR, "pytest==7.3.2", "hypothesis"])


def torch_paths() -> dict:
    code = ("import json, sys, torch, torch.utils.cpp_extension as c, torch.testing._internal.common_utils as u; "
            "print(json.dumps({'version': torch.__version__, 'include': c.include_paths(), 'lib': c.library_paths(),"
            " 'abi': int(torch._C._GLIBCXX_USE_CXX11_ABI), 'common_utils': u.__file__}))")
    out = subprocess.run([VENV_PYTHON, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def build_torchbind(tree: Path, paths: dict) -> None:
    """libtorchbind_test.so from the tree's test/cpp/jit, where find_library_location looks for it after
    torch/lib: torch/build/lib, three folders up from common_utils.py. TestFX and the export tests load it in
    setUp (in site-packages/build/lib, where this put it before, they failed on both sides: 247 tests)."""
    target = Path(paths["common_utils"]).resolve().parents[2] / "build" / "lib" / "libtorchbind_test.so"
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tree / "test" / "cpp" / "jit" / "test_custom_class_registrations.cpp"
    say(f"g++ {source.relative_to(tree)} -> {target}")
    cmd = ["g++", "-shared", "-fPIC", "-O1", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={paths['abi']}",
           f"-I{tree}", *[f"-I{p}" for p in paths["include"]], source, "-o", target,
           *[f"-L{p}" for p in paths["lib"]], *[f"-Wl,-rpath,{p}" for p in paths["lib"]],
           "-ltorch", "-ltorch_cpu", "-lc10"]
    run(cmd)


# ---------------------------------------------------------------------------------------------- the runs


def overlay_applied() -> bool:
    """Whether .venv's torch has a series applied (the tool keeps its record in the dist-info folder)."""
    return any((REPO / ".venv" / "lib").glob("python3*/site-packages/torch-*.dist-info/overlay"))


def run_suite(tree: Path, groups: list[list[str]], label: str, results: Path) -> list[Path]:
    """One pytest process per group, in order; junit XML and output per group in ``results``."""
    env = dict(os.environ, PYTHONPATH=str(PYTEST_DIR), PYTHONDONTWRITEBYTECODE="1")
    xmls = []
    for i, group in enumerate(groups):
        xml = results / f"{label}-{i}.xml"
        # --continue-on-collection-errors: a file the wheel cannot import (test/fx/test_shape_inference.py needs
        # a module only the source tree has) is an error row on both sides, not the end of its group's run
        cmd = [VENV_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", f"--junitxml={xml}",
               "--continue-on-collection-errors", *group]
        say(f"{label}: {' '.join(group)}")
        start = time.time()
        proc = subprocess.run([str(c) for c in cmd], cwd=tree, env=env, capture_output=True, text=True)
        (results / f"{label}-{i}.log").write_text(proc.stdout + proc.stderr)
        tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        say(f"{label}: {tail} ({time.time() - start:.0f} s)")
        if not xml.exists():
            raise SystemExit(f"pytest wrote no junit XML for {group} on {label} torch; see {results}/{label}-{i}.log")
        xmls.append(xml)
    return xmls


def outcomes(xmls: list[Path]) -> tuple[dict[str, str], dict[str, str]]:
    """(node id -> passed | failed | error | skipped, node id -> failure text), from junit XML."""
    result, texts = {}, {}
    for xml in xmls:
        for case in ET.parse(xml).getroot().iter("testcase"):
            test_id = f"{node_id(case.get('classname'))}::{case.get('name')}"
            state = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    state = {"failure": "failed"}.get(child.tag, child.tag)
                    texts[test_id] = child.text or ""
                    break
            result[test_id] = state
    return result, texts


def diff_rows(text: str) -> list[str]:
    """The '- row' / '+ row' lines of an expected-output failure (pytest prefixes them with 'E   ')."""
    rows = []
    for line in text.splitlines():
        body = line[1:].strip() if line.startswith("E ") else line.strip()
        if body[:2] in ("- ", "+ "):
            rows.append(body)
    return rows


def node_id(classname: str) -> str:
    """junit classname 'functorch.test_aotdispatch.TestAOTAutograd' -> 'test/functorch/test_aotdispatch.py::TestAOTAutograd'."""
    module, _, cls = classname.rpartition(".")
    path = module.replace(".", "/") + ".py"
    return f"{path if path.startswith('test/') else 'test/' + path}::{cls}"


def compare(pristine: dict[str, str], patched: dict[str, str], texts: dict[str, str]) -> tuple[list[tuple], dict]:
    rows = []
    counts = {"tests": 0, "pristine": {}, "patched": {}, "regressions": 0, "known": 0, "fixed": 0}
    for full in sorted(set(pristine) | set(patched)):
        a, b = pristine.get(full, "absent"), patched.get(full, "absent")
        counts["tests"] += 1
        counts["pristine"][a] = counts["pristine"].get(a, 0) + 1
        counts["patched"][b] = counts["patched"].get(b, 0) + 1
        verdict = ""
        if a == "passed" and b in ("failed", "error", "absent"):
            known = KNOWN_UPSTREAM_UPDATES.get(full)
            is_known = known is not None and diff_rows(texts.get(full, "")) == known["diff"]
            verdict = "known upstream update" if is_known else "REGRESSION"
            counts["known" if is_known else "regressions"] += 1
        elif b == "passed" and a in ("failed", "error"):
            verdict = "passes only patched"
            counts["fixed"] += 1
        rows.append((full, a, b, verdict))
    return rows, counts


def run_pristine(tree: Path, groups: list[list[str]], raw: Path) -> dict[str, str]:
    """The outcomes of ``groups`` on the pristine release: .venv's torch reverted for the run, applied again
    afterwards whatever happens."""
    try:
        say("torch-overlay revert (pristine torch)")
        run([OVERLAY, "revert"], capture_output=True)
        return outcomes(run_suite(tree, groups, "pristine", raw))[0]
    finally:
        say("torch-overlay apply (patched torch, as .venv was)")
        run([OVERLAY, "apply"], capture_output=True)


def recorded_pristine(table: Path) -> dict[str, str]:
    """node id -> pristine outcome, from the pristine column of an earlier run's compare.tsv."""
    lines = table.read_text().splitlines()[1:]
    return {test: state for test, state, *_ in (line.split("\t") for line in lines)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slice", choices=sorted(SLICES), default="ci")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "upstream-suite")
    p.add_argument("--recorded-pristine", type=Path, metavar="COMPARE_TSV",
                   help="take the pristine outcomes from this earlier table (a compare.tsv of the same slice) and "
                        "run on pristine torch only the tests whose patched outcome differs from it, or that it "
                        "lacks: half the CPU time of a full comparison (CI)")
    p.add_argument("tests", nargs="*", help="pytest node ids (relative to the PyTorch tree) instead of a slice")
    args = p.parse_args(argv)
    groups = [args.tests] if args.tests else SLICES[args.slice]
    label = "custom" if args.tests else args.slice
    results = args.results / label  # the comparison table and the figures (kept in git under bench/)
    raw = WORK / "runs" / label  # junit XML and pytest output of both runs
    for folder in (results, raw):
        folder.mkdir(parents=True, exist_ok=True)

    paths = torch_paths()
    if paths["version"].split("+")[0] != RELEASE or not overlay_applied():
        raise SystemExit(f"upstream_suite: .venv holds torch {paths['version']}"
                         f"{'' if overlay_applied() else ' without the series applied'}; this gate needs patched "
                         f"torch {RELEASE}. Nothing was run or changed. Run: bash scripts/setup.sh --torch {RELEASE}"
                         f" (or .venv/bin/torch-overlay apply)")
    tree = fetch_source()
    install_pytest_732()
    if any(t.startswith(NEEDS_TORCHBIND) for g in groups for t in g):
        build_torchbind(tree, paths)

    start = time.time()
    if args.recorded_pristine:
        patched, failures = outcomes(run_suite(tree, groups, "patched", raw))
        pristine = recorded_pristine(args.recorded_pristine)
        recheck = [t for t in sorted(patched) if patched[t] != pristine.get(t)]
        say(f"{len(recheck)} of {len(patched)} patched outcomes differ from {args.recorded_pristine} or are not in "
            f"it: those run on pristine torch")
        if recheck:
            pristine.update(run_pristine(tree, [recheck], raw))
    else:
        recheck = None
        pristine = run_pristine(tree, groups, raw)
        patched, failures = outcomes(run_suite(tree, groups, "patched", raw))
    rows, counts = compare(pristine, patched, failures)

    with open(results / "compare.tsv", "w") as f:
        f.write("test\tpristine\tpatched\tverdict\n")
        f.writelines("\t".join(r) + "\n" for r in rows)
    command = "python scripts/upstream_suite.py " + (" ".join(args.tests) if args.tests else f"--slice {args.slice}")
    if args.recorded_pristine:
        command += f" --recorded-pristine {args.recorded_pristine}"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the machine may be shared: CPU time says more
    summary = {"command": command, "torch": paths["version"], "seconds": round(time.time() - start),
               **({"pristine_rerun": len(recheck)} if recheck is not None else {}),
               "cpu_seconds": round(children.ru_utime + children.ru_stime), **counts,
               "groups": groups,
               "regressions_list": [r[0] for r in rows if r[3] == "REGRESSION"],
               "known_list": [r[0] for r in rows if r[3] == "known upstream update"],
               "passes_only_patched": [r[0] for r in rows if r[3] == "passes only patched"]}
    (results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    say(f"{counts['tests']} tests; pristine {counts['pristine']}; patched {counts['patched']}; "
        f"{counts['regressions']} regressions, {counts['known']} known upstream updates "
        f"({time.time() - start:.0f} s; table in {results / 'compare.tsv'})")
    for r in rows:
        if r[3] in ("REGRESSION", "known upstream update"):
            print(f"   {r[3]}: {r[0]}")
    return 1 if counts["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
