"""``torch-overlay report``: a user's script run unchanged, its graphs captured, the page checked in Chromium.

report_script.py is the user's script: it calls torch.compile and knows nothing of the
report. The page is loaded in a real headless Chromium (Debian's ``chromium``); the
assertions run on the DOM Chromium serialises after loading it, and a screenshot is
kept as a test artifact under build/report-test/.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from scratch_torch import REPO
from torch_overlay.report import output_path, split_trailing_options

SCRIPT = Path(__file__).resolve().parent / "report_script.py"
ARTIFACTS = REPO / "build" / "report-test"
CHROMIUM = shutil.which("chromium")


def report_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_overlay", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The report of the flex_attention model with an unannotated scale of its loss,
    options after the script's own arguments, as the usage line shows."""
    cwd = tmp_path_factory.mktemp("mixed")
    proc = report_cli(SCRIPT, "mixed", "2", "-o", "out/mixed.html", "--fail-on-unannotated", cwd=cwd)
    return proc, cwd / "out" / "mixed.html"


def test_script_runs_unchanged_with_its_arguments(mixed):
    """The script prints under the report what it prints on its own, in the same environment
    (the loss digits depend on the machine's floating point, so they are compared, not spelled out)."""
    proc, _ = mixed
    alone = subprocess.run([sys.executable, str(SCRIPT), "mixed", "2"], capture_output=True, text=True,
                           timeout=600)
    assert alone.returncode == 0, alone.stderr[-2000:]
    expected = alone.stdout.splitlines()
    assert [line.split(" loss ")[0] for line in expected] == ["step 0", "step 1"], alone.stdout
    assert proc.stdout.splitlines()[:2] == expected, proc.stdout


def test_one_progress_line_per_captured_graph(mixed):
    proc, _ = mixed
    progress = [l for l in proc.stderr.splitlines() if l.startswith("report: captured ")]
    assert [l.split(" (")[0] for l in progress] == [
        "report: captured dynamo graph 1", "report: captured forward graph 2", "report: captured backward graph 3"]


def test_fail_on_unannotated_exits_1_and_lists_the_ops(mixed):
    proc, page = mixed
    assert proc.returncode == 1, proc.stderr
    assert page.is_file()
    lines = proc.stderr.splitlines()
    i = lines.index("report: backward ops without an annotation:")
    # The backward op of the unannotated "* 0.5", linked to its forward op.
    assert lines[i + 1:] == ["  backward graph 3: mul_1 (aten.mul.Tensor), forward op mul"]


def test_fully_annotated_script_passes(tmp_path):
    proc = report_cli("--fail-on-unannotated", "-o", "r.html", SCRIPT, "annotated", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "report: wrote r.html: 3 graphs, 15 backward ops, 0 without an annotation"
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    # h is used three times: autograd's two gradient-accumulation adds belong to no region
    # and are counted apart, not as unannotated.
    assert '<td class="num">6</td><td class="num">13</td><td class="num">100%</td><td class="num">0</td>' in page
    assert '<td class="num">0</td><td class="num">2</td><td class="num">–</td><td class="num">2</td>' in page


def test_an_op_traced_between_ops_is_named_by_its_target():
    # torch writes original_aten = None when an op ends: a sym_size.int traced after it carries None
    import torch
    import torch.fx.traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_overlay.graph_table import meta_rows
    from torch_overlay.report.capture import snapshot_ops

    with fx_traceback.preserve_node_meta():
        gm = make_fx(lambda x: (x.sin(), x.shape[0] * 2), tracing_mode="symbolic")(torch.randn(3))
    assert [op.target for op in snapshot_ops(gm)] == ["aten.sin.default", "sym_size.int", "mul"]
    assert [row[3] for row in meta_rows(gm)] == ["aten.sin.default", "", ""]  # OrigAten


def test_missing_script_is_an_error_and_writes_nothing(tmp_path):
    proc = report_cli(tmp_path / "nope.py", "-o", "r.html", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: cannot run {tmp_path / 'nope.py'}: no such file")
    assert "unchanged: no report was written" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_output_under_a_file_is_refused_before_the_script_runs(tmp_path):
    """An output path that cannot be created is an error before the script runs (it used to run the whole
    script, then fail with FileExistsError)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("mine\n")
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = report_cli(script, "-o", blocker / "r.html", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: cannot write the report {blocker / 'r.html'}: {blocker} is not a folder")
    assert "unchanged: the script was not run; no report was written" in proc.stderr
    assert not marker.exists() and blocker.read_text() == "mine\n"


def test_trailing_report_options_are_peeled_off_the_script_args():
    assert split_trailing_options(["a", "-o", "x.html", "--fail-on-unannotated"], "report.html", False) == \
        (["a"], "x.html", True, False)
    assert split_trailing_options(["-o", "mine", "b"], "report.html", False) == \
        (["-o", "mine", "b"], "report.html", False, False)
    assert split_trailing_options(["--output=y.html"], "report.html", False) == ([], "y.html", False, False)
    assert split_trailing_options(["a", "--profile", "-o", "z.html"], "report.html", False) == \
        (["a"], "z.html", False, True)


def test_one_page_per_rank_under_torchrun():
    assert output_path("out/report.html", None) == Path("out/report.html")
    assert output_path("out/report.html", 1) == Path("out/report.rank1.html")


# -- the page in Chromium --------------------------------------------------------------------------

class Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.content = [], []  # content: text and child elements, in document order

    @property
    def classes(self):
        return set(self.attrs.get("class", "").split())

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def all_text(self):
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)


class DomBuilder(HTMLParser):
    VOID = {"meta", "br", "img", "link", "input", "hr"}

    def __init__(self):
        super().__init__()
        self.root = self.current = Element("#document", {}, None)

    def handle_starttag(self, tag, attrs):
        el = Element(tag, attrs, self.current)
        self.current.children.append(el)
        self.current.content.append(el)
        if tag not in self.VOID:
            self.current = el

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.content.append(data)


def png_pixel_bytes(path: Path) -> bytes:
    """The decompressed image data of a PNG (filter bytes included): enough to tell a blank page from a
    drawn one."""
    data, pos, idat = path.read_bytes(), 8, b""
    while pos < len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


def chromium(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dom(mixed):
    # Never a skip: scripts/test.sh installs Debian's chromium; a machine where that failed fails here.
    assert CHROMIUM is not None, ("headless Chromium is not installed, so the page cannot be checked in a browser: "
                                  "run scripts/test.sh as root (it installs Debian's chromium) or "
                                  "apt-get install -y chromium")
    _, page = mixed
    proc = chromium("--dump-dom", page.as_uri())
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    builder = DomBuilder()
    builder.feed(proc.stdout)
    return builder.root


def test_page_coverage_table(dom):
    rows = [[td.all_text() for td in tr.iter() if td.tag == "td"]
            for tr in dom.iter() if "coverage-row" in tr.classes]
    assert rows[0][0] == "{'region': 'attention'}" and rows[1][0] == "{'region': 'head'}"
    assert rows[-1][0] == "(no annotation)"
    by_region = {r[0]: r[1:] for r in rows}
    # Every backward op of the two regions is annotated; the "* 0.5" has no region.
    assert by_region["{'region': 'attention'}"][2] == "100%"
    assert by_region["{'region': 'head'}"][2] == "100%"
    assert by_region["(no annotation)"][0] == "1" and by_region["(no annotation)"][2] == "0%"


def test_page_links_every_backward_op_to_its_forward_op(dom):
    ids = {el.attrs["id"] for el in dom.iter() if "id" in el.attrs}
    backward_rows = [tr for table in dom.iter() if "backward-ops" in table.classes
                     for tr in table.iter() if "op" in tr.classes]
    assert len(backward_rows) == 41
    linked = [a for tr in backward_rows for a in tr.iter() if "forward-link" in a.classes]
    assert all(a.attrs["href"][1:] in ids for a in linked)
    # Backward HOP subgraph ops are there and linked too (flex_attention_backward's graphs).
    sub_rows = [tr for tr in backward_rows if "graph." in tr.attrs["id"]]
    assert {tr.attrs["id"].split("-")[2].split(".")[0] for tr in sub_rows} >= {"fw_graph", "joint_graph", "mask_graph"}
    # Not linked: the backward mask_graph, which evaluates the forward mask_mod again (no
    # autograd_backward, and a fresh seq_nr that equals the unrelated forward "* 0.5" op's), and
    # autograd's gradient accumulation. Forward ops the partitioner recomputes or moves into the
    # backward graph (view_4, 2.5.1's detaches of saved activations) are autograd_backward there,
    # as in upstream 2.13, and are linked to a forward op: view_4 to the node it was copied from,
    # a detach to the op whose saved output it detaches (the forward op of its seq_nr).
    unlinked = [tr for tr in backward_rows if not any("forward-link" in a.classes for a in tr.iter())]
    assert sorted(tr.attrs["id"] for tr in unlinked if "gradient-accumulation" not in tr.classes) == [
        "op-3-mask_graph.ge"]
    for name in ("detach_2", "detach_3"):
        (row,) = [tr for tr in backward_rows if tr.attrs["id"] == f"op-3-{name}"]
        (link,) = [a.attrs["href"] for a in row.iter() if a.tag == "a"]
        assert link.startswith("#op-2-") and link[1:] in ids
    (view_4,) = [tr for tr in backward_rows if tr.attrs["id"] == "op-3-view_4"]
    assert [a.attrs["href"] for a in view_4.iter() if a.tag == "a"] == ["#op-2-view_4"]


def test_page_highlights_the_unannotated_backward_op(dom):
    highlighted = [tr.attrs["id"] for tr in dom.iter() if tr.tag == "tr" and "unannotated" in tr.classes]
    assert highlighted == ["op-3-mul_1"]
    (listing,) = [el for el in dom.iter() if el.attrs.get("id") == "unannotated"]
    assert [li.all_text() for li in listing.iter() if li.tag == "li"] == [
        "backward graph 3: mul_1 aten.mul.Tensor from forward op mul"]


def test_page_draws_the_regions(dom):
    """The inline SVG: one picture for the compilation, a band per region labelled with the coverage table's
    counts, one cell per forward and backward op, a line per backward op linked to its forward op, and the
    unannotated backward op marked."""
    (svg,) = [el for el in dom.iter() if el.tag == "svg" and "region-map" in el.classes]
    coverage = {tr.attrs["data-region"]: [td.all_text() for td in tr.iter() if td.tag == "td"][1:3]
                for tr in dom.iter() if "coverage-row" in tr.classes}
    bands = {g.attrs["data-region"]: g for g in svg.iter() if "region-band" in g.classes}
    assert list(bands) == list(coverage)
    for region, (fw, bw) in coverage.items():
        (label,) = [t.all_text() for t in bands[region].iter() if "region-label" in t.classes]
        assert label == f"{region}: {fw} forward, {bw} backward ops"
    cells = [el for el in svg.iter() if "op-cell" in el.classes]
    forward_rows = [tr for table in dom.iter() if "forward-ops" in table.classes for tr in table.iter()
                    if "op" in tr.classes]
    backward_rows = [tr for table in dom.iter() if "backward-ops" in table.classes for tr in table.iter()
                     if "op" in tr.classes]
    assert len([c for c in cells if "fw" in c.classes]) == len(forward_rows)
    assert len([c for c in cells if "bw" in c.classes]) == len(backward_rows)
    assert len([c for c in cells if "unannotated" in c.classes]) == 1
    assert len([el for el in svg.iter() if "unannotated-mark" in el.classes]) == 1
    linked = [tr for tr in backward_rows if any("forward-link" in a.classes for a in tr.iter())]
    assert len([el for el in svg.iter() if "pairing" in el.classes]) == len(linked)


def test_page_is_self_contained(dom):
    for el in dom.iter():
        for attr in ("src", "href"):
            assert not el.attrs.get(attr, "#").split("#")[0], (el.tag, el.attrs)
        assert el.tag not in ("script", "link", "img", "iframe")


def keep_screenshot(page: Path, name: str, height: int) -> None:
    """A screenshot of ``page`` in Chromium, kept with the page under build/report-test/ as ``name``.png/.html."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    chromium(f"--screenshot={shot}", f"--window-size=1400,{height}", "--hide-scrollbars", page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert len(set(png_pixel_bytes(shot))) > 16, "the screenshot is blank"
    shutil.copy(page, ARTIFACTS / f"{name}.html")


def test_page_screenshot(mixed, dom):
    keep_screenshot(mixed[1], "report", 1800)


def test_coverage_marks_regions_torch_reads():
    """The coverage table says which regions regional Inductor compiles (compile_with_inductor, with its
    inductor_configs) and which carry an activation memory budget (_region_activation_memory_budget)."""
    from torch_overlay.report.capture import CapturedGraph, CapturedOp
    from torch_overlay.report.html import render
    from torch_overlay.report.model import build_report

    inductor = {"compile_with_inductor": {"inductor_configs": {"max_autotune": True}}}
    budget = {"_region_activation_memory_budget": 0.5}

    def op(name, seq_nr, custom, backward=False):
        return CapturedOp("", name, "aten.mul.Tensor", seq_nr, custom, backward, False)

    graphs = [CapturedGraph(0, 0, "forward", [op("mul", 1, inductor), op("mul_1", 2, budget), op("mul_2", 3, None)]),
              CapturedGraph(1, 0, "backward", [op("mul_3", 1, inductor, True), op("mul_4", 2, None, True)])]
    builder = DomBuilder()
    builder.feed(render(build_report(graphs), title="t", details=[]))
    rows = {el.attrs["data-region"]: el for el in builder.root.iter() if "coverage-row" in el.classes}
    read_by = {name: next(c for c in row.children if "consumers" in c.classes).all_text() for name, row in rows.items()}
    assert read_by == {repr(inductor): "regional Inductor with {'max_autotune': True}",
                       repr(budget): "activation memory budget 0.5", "(no annotation)": ""}
    assert "inductor-region" in rows[repr(inductor)].classes and "memory-budget-region" in rows[repr(budget)].classes
    assert not {"inductor-region", "memory-budget-region"} & rows["(no annotation)"].classes


# -- --profile: the time per region ----------------------------------------------------------------

def has_kernel_annotations() -> bool:
    import torch._inductor.config as inductor_config

    return hasattr(inductor_config, "kernel_annotations")


PROFILE_STEPS = 3
needs_flag = pytest.mark.skipif(
    not has_kernel_annotations(),
    reason="this torch has no torch._inductor.config.kernel_annotations (its series does not add the flag), so "
           "--profile is refused: test_profile_is_refused_without_the_flag checks the refusal")


@pytest.mark.skipif(has_kernel_annotations(), reason="this torch has torch._inductor.config.kernel_annotations: "
                    "the profiled page is checked below")
def test_profile_is_refused_without_the_flag(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = report_cli(script, "-o", "r.html", "--profile", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    import torch

    assert proc.stderr.startswith(f"error: torch {torch.__version__} has no torch._inductor.config.kernel_annotations"), \
        proc.stderr
    assert "unchanged: the script was not run; no report was written" in proc.stderr
    assert "to do: " in proc.stderr and "without --profile" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["script.py"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """The README's demo model under the default Inductor, PROFILE_STEPS steps, with --profile."""
    cwd = tmp_path_factory.mktemp("profiled")
    proc = report_cli(SCRIPT, "demo", PROFILE_STEPS, "-o", "out/demo.html", "--profile", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, cwd / "out" / "demo.html", cwd / "out" / "demo.trace.json"


@pytest.fixture(scope="module")
def profiled_dom(profiled):
    assert CHROMIUM is not None, "headless Chromium is not installed: apt-get install -y chromium"
    proc = chromium("--dump-dom", profiled[1].as_uri())
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    builder = DomBuilder()
    builder.feed(proc.stdout)
    return builder.root


# The demo's regions: their scope labels (local-inductor-kernel-annotations' rule) and their names on the page.
DEMO_LABELS = {"region='attention'": "{'region': 'attention'}", "region='head'": "{'region': 'head'}"}


def trace_sums(trace: Path) -> dict:
    """{(page region name, "fw"/"bw"): [µs, scopes]} read from the Chrome trace alone, as torch wrote it (no scope
    nests in another in Inductor's code)."""
    import json

    sums: dict = {}
    for event in json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]:
        name = event.get("name", "")
        if event.get("cat") != "user_annotation" or not name.startswith("annotation "):
            continue
        text = name[len("annotation "):]
        kind = "bw" if text.endswith(" (backward)") else "fw"
        region = DEMO_LABELS.get(text[:-len(" (backward)")] if kind == "bw" else text, text)
        entry = sums.setdefault((region, kind), [0.0, 0])
        entry[0] += float(event["dur"])
        entry[1] += 1
    return sums


def time_rows(dom) -> dict:
    """{region: (forward µs, forward kernel calls, backward µs, backward kernel calls)} of the page's table."""
    rows = {}
    for tr in dom.iter():
        if "region-time-row" in tr.classes:
            tds = [td for td in tr.iter() if td.tag == "td"]
            rows[tr.attrs["data-region"]] = (float(tds[1].attrs["data-us"]), int(tds[2].all_text()),
                                             float(tds[3].attrs["data-us"]), int(tds[4].all_text()))
    return rows


@needs_flag
def test_profile_writes_the_page_and_the_trace(profiled):
    proc, page, trace = profiled
    assert page.is_file() and trace.is_file()
    assert [l.split(" loss ")[0] for l in proc.stdout.splitlines()[:PROFILE_STEPS]] == [
        f"step {i}" for i in range(PROFILE_STEPS)]
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("report: wrote out/demo.trace.json: ") and last.endswith(" in 2 regions"), last
    # The profiler's "Toggling CPU activity ..." lines (one per pause and resume) are not the user's business.
    assert "Toggling" not in proc.stderr and "callback is not found" not in proc.stderr, proc.stderr[-2000:]


@needs_flag
def test_page_time_per_region(profiled, profiled_dom):
    """Both regions of the demo model take time forward and backward, every step runs the same kernels, and
    the table says what the Chrome trace beside the page holds."""
    rows = time_rows(profiled_dom)
    assert list(rows) == ["{'region': 'attention'}", "{'region': 'head'}"]
    sums = trace_sums(profiled[2])
    for region, (fw_us, fw_kernels, bw_us, bw_kernels) in rows.items():
        assert fw_us > 0 and bw_us > 0, region
        assert fw_kernels > 0 and bw_kernels > 0 and fw_kernels % PROFILE_STEPS == 0 == bw_kernels % PROFILE_STEPS, \
            (region, fw_kernels, bw_kernels)
        for kind, us, kernels in (("fw", fw_us, fw_kernels), ("bw", bw_us, bw_kernels)):
            trace_us, trace_kernels = sums.pop((region, kind))
            assert kernels == trace_kernels, (region, kind)
            assert abs(us - trace_us) <= 0.01 + 0.002 * kernels, (region, kind, us, trace_us)
    assert sums == {}, "the trace has scopes the page does not show"
    import torch

    if not torch.cuda.is_available():  # the README's figures: Inductor's C++ kernels and extern calls a step
        assert {r: (fw // PROFILE_STEPS, bw // PROFILE_STEPS) for r, (_, fw, _, bw) in rows.items()} == {
            "{'region': 'attention'}": (4, 8), "{'region': 'head'}": (3, 4)}
    (trace,) = [el for el in profiled_dom.iter() if el.attrs.get("id") == "trace"]
    assert "demo.trace.json" in trace.all_text()


@needs_flag
def test_page_draws_time_per_region(profiled_dom):
    """The bar chart beside the region picture: per region a forward and a backward bar with the table's times
    and kernel calls, their lengths on one scale."""
    rows = time_rows(profiled_dom)
    (columns,) = [el for el in profiled_dom.iter() if "columns" in el.classes
                  and any(c.attrs.get("id") == "region-maps" for c in el.children)]
    assert [c.attrs.get("id") for c in columns.children] == ["region-maps", "region-time-chart"]
    (svg,) = [el for el in columns.iter() if el.tag == "svg" and "region-times" in el.classes]
    groups = [g for g in svg.iter() if "region-time" in g.classes]
    assert [g.attrs["data-region"] for g in groups] == list(rows)
    longest = max(max(r[0], r[2]) for r in rows.values())
    for g in groups:
        fw_us, fw_kernels, bw_us, bw_kernels = rows[g.attrs["data-region"]]
        (label,) = [t.all_text() for t in g.iter() if "region-label" in t.classes]
        assert label == g.attrs["data-region"]
        (fw,) = [r for r in g.iter() if "time-bar" in r.classes and "fw" in r.classes]
        (bw,) = [r for r in g.iter() if "time-bar" in r.classes and "bw" in r.classes]
        for bar, us, kernels in ((fw, fw_us, fw_kernels), (bw, bw_us, bw_kernels)):
            assert float(bar.attrs["data-us"]) == us and int(bar.attrs["data-kernels"]) == kernels
            assert abs(float(bar.attrs["width"]) - 300 * us / longest) <= 0.01
        assert fw.attrs["fill"] == bw.attrs["fill"] != "#bbbbbb"


@needs_flag
def test_profiled_page_screenshot(profiled, profiled_dom):
    keep_screenshot(profiled[1], "report-profile", 1200)
