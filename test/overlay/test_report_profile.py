"""The per-region sums of ``torch-overlay report --profile`` (torch_overlay/report/profile.py), over real profiles.

Every profile here is a real ``torch.profiler`` run of real ops inside ``record_function`` scopes named as the
``kernel_annotations`` flag names its kernels' scopes (``annotation key=value, ...``, `` (backward)``, the
kernel's name as the scope's argument): the events are torch's own, only the scopes are opened by the test instead of by
generated code. The end-to-end run on a patched torch is in test_report.py.
"""
from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.testing._internal.common_utils import TestCase, run_tests

from torch_overlay.report.capture import CapturedGraph, CapturedOp
from torch_overlay.report.model import build_report
from torch_overlay.report.profile import (known_labels, page_names, parse_scope_name, quote_names, region_times,
                                          scope_label, trace_path)

ATTENTION = {"region": "attention"}
HEAD = {"region": "head", "layer": 0}
# The scope names the flag gives them (local-inductor-kernel-annotations' scope_label), written out.
NAMES = {repr(ATTENTION): "annotation region='attention'", repr(HEAD): "annotation layer=0, region='head'"}
KNOWN = {"region='attention'": ATTENTION, "layer=0, region='head'": HEAD}
# Annotations and their labels: the patch's rule, one case per clause.
LABELS = [
    ({"ac_region_id": 0}, "ac_region_id=0"),
    ({"stage": "attn", "layer": 3}, "layer=3, stage='attn'"),
    ({"b": None, "a": True, "c": 1.5}, "a=true, b=null, c=1.5"),
    ({2: "x", "10": [1, 2]}, "10=[1, 2], 2='x'"),  # keys of mixed types, in the order of their text
    ({"cfg": {"z": 1, "a": "q"}}, "cfg={'a': 'q', 'z': 1}"),
    ({"ids": (1, 2), "f": {1.5}}, "f='{1.5}', ids=[1, 2]"),  # what JSON cannot hold is its repr, as a string
    ({"say": 'a "b" \\ c'}, "say='a /'b/' // c'"),
    ({'k"\\': 1}, "k'/=1"),
    ({"tab\tkey": 1}, "tab/tkey=1"),
    ({"nested": {(1, 2): "t"}}, "nested='{(1, 2): 't'}'"),  # a key JSON cannot hold: the value's repr
    ({"région": "café", "n": ["é"]}, "n=['é'], région='café'"),  # beyond ASCII: as it is, keys and values alike
]


def scope(custom, backward=False, kernel="cpp_fused_0"):
    """A scope as the flag opens one (the interface's NAME and ARGS)."""
    name = NAMES.get(repr(custom)) or "annotation " + scope_label(custom)
    return record_function(name + (" (backward)" if backward else ""), kernel)


def span(event) -> float:
    return event.time_range.end - event.time_range.start


def profiled(body):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        body()
    return prof.events()


class TestScopeNames(TestCase):
    def test_forward_and_backward_names(self):
        self.assertEqual(parse_scope_name("annotation region='attention'"), ("region='attention'", False))
        self.assertEqual(parse_scope_name("annotation layer=0, region='head' (backward)"),
                         ("layer=0, region='head'", True))

    def test_labels(self):
        for custom, label in LABELS:
            self.assertEqual(scope_label(custom), label, custom)
            self.assertNotIn('"', label)
            self.assertNotIn("\\", label)

    def test_labels_are_the_patch_rule(self):
        """The report renders annotations as the patched torch names its scopes, where this torch has the flag."""
        try:
            import torch._inductor.kernel_annotations as kernel_annotations
        except ImportError:
            self.skipTest("this torch has no torch._inductor.kernel_annotations (its series does not add the flag)")
        for custom, _ in LABELS + [(ATTENTION, None), (HEAD, None)]:
            self.assertEqual(scope_label(custom), kernel_annotations.scope_label(custom), custom)

    def test_other_events_are_not_scopes(self):
        for name in ("aten::mm", "annotation", "annotation ", "annotation  (backward)", "my annotation a=1",
                     "## annotation a=1 ##"):
            self.assertIsNone(parse_scope_name(name), name)

    def test_known_labels_are_the_report_annotations(self):
        def op(name, custom):
            return CapturedOp("", name, "aten.mm.default", 1, custom, False, False)

        report = build_report([CapturedGraph(1, 1, "forward", [op("mm", HEAD), op("mm_1", None),
                                                               op("mm_2", ATTENTION)])])
        self.assertEqual(known_labels(report), KNOWN)


class TestRegionTimes(TestCase):
    def test_sums_per_region_and_direction_of_a_training_step(self):
        """A forward and backward step as compiled code runs it: a kernel scope per call, regions in both
        directions, unannotated kernels outside any scope, and the script's own scopes around them."""
        torch.manual_seed(0)
        w1 = torch.randn(128, 128, requires_grad=True)
        w2 = torch.randn(128, 16, requires_grad=True)
        x = torch.randn(64, 128)

        def step():
            with record_function("step"):
                with scope(ATTENTION, kernel="extern_kernels.mm"):
                    h = torch.mm(x, w1)
                with scope(ATTENTION):
                    h = torch.softmax(h, dim=-1)
                with scope(HEAD, kernel="extern_kernels.mm"):
                    out = torch.mm(h, w2)
                loss = out.sum()  # unannotated: no scope
                g_out = torch.ones_like(out)
                # a kernel scope holds one call (the transposes are views Inductor folds into the call's
                # arguments); an op more inside would count as one more kernel call
                w2_t, x_t = w2.t(), x.t()
                with scope(HEAD, backward=True, kernel="extern_kernels.mm"):
                    g_h = torch.mm(g_out, w2_t)
                with scope(ATTENTION, backward=True, kernel="extern_kernels.mm"):
                    torch.mm(x_t, g_h)
                return loss

        def body():
            for _ in range(3):
                step()

        events = profiled(body)
        times = region_times(events, KNOWN)
        self.assertEqual([t.key for t in times], ["region='attention'", "layer=0, region='head'"])
        attention, head = times
        self.assertEqual((attention.custom, head.custom), (ATTENTION, HEAD))
        self.assertEqual([attention.forward_kernels, attention.backward_kernels], [6, 3])
        self.assertEqual([head.forward_kernels, head.backward_kernels], [3, 3])

        def spans(name):
            return sum(span(e) for e in events if e.name == name)

        # Nothing nested here: a region's time is its scopes' spans, which hold the aten ops they run
        # (the profiler's self time of an extern call's scope would leave its aten::mm out).
        attention_name, head_name = NAMES[repr(ATTENTION)], NAMES[repr(HEAD)]
        self.assertAlmostEqual(attention.forward_us, spans(attention_name), places=3)
        self.assertAlmostEqual(attention.backward_us, spans(attention_name + " (backward)"), places=3)
        self.assertAlmostEqual(head.forward_us, spans(head_name), places=3)
        self.assertAlmostEqual(head.backward_us, spans(head_name + " (backward)"), places=3)
        mm_in_attention = sum(span(e) for e in events if e.name == "aten::mm"
                              and e.cpu_parent.name == attention_name)
        self.assertGreater(mm_in_attention, 0)
        self.assertGreaterEqual(attention.forward_us, mm_in_attention)
        
    def test_a_nested_scope_counts_once(self):
        """An eager scope holding a compiled region's kernel scopes (regional Inductor): the inner scopes'
        time is theirs, the outer keeps the rest, and the sum is the outer span."""
        x = torch.randn(256, 256)

        def body():
            with scope(ATTENTION, kernel="eager"):
                y = x.sin()
                with scope(HEAD, kernel="cpp_fused_cos_0"):
                    y = y.cos()
                    with record_function("not a region"):
                        with scope(HEAD, kernel="cpp_fused_exp_1"):
                            y = y.exp()
                y = y.tanh()

        events = profiled(body)
        (outer,) = [e for e in events if e.name == NAMES[repr(ATTENTION)]]
        inner = sorted((e for e in events if e.name == NAMES[repr(HEAD)]), key=lambda e: e.time_range.start)
        attention, head = region_times(events, KNOWN)
        self.assertAlmostEqual(attention.forward_us, span(outer) - span(inner[0]), places=3)
        # The second head scope sits in the first (a user's scope between them): the first keeps its span
        # less the second's, so the two together count the first's span once.
        self.assertAlmostEqual(head.forward_us, span(inner[0]), places=3)
        # the eager scope ran two ops (sin, tanh); each kernel scope one kernel
        self.assertEqual((attention.forward_kernels, head.forward_kernels), (2, 2))
        self.assertAlmostEqual(attention.forward_us + head.forward_us, span(outer), places=3)

    def test_no_scope_no_region(self):
        x = torch.randn(8, 8)
        self.assertEqual(region_times(profiled(lambda: x.mm(x)), KNOWN), [])

    def test_a_scope_the_report_does_not_know_counts_under_its_own_text(self):
        x = torch.randn(8, 8)

        def body():
            with scope(ATTENTION):
                x.mm(x)
            with record_function("annotation stage=7 (backward)"):
                x.mm(x)

        attention, other = region_times(profiled(body), KNOWN)
        self.assertEqual((attention.key, attention.custom), ("region='attention'", ATTENTION))
        self.assertEqual((other.key, other.custom, other.forward_kernels, other.backward_kernels),
                         ("stage=7", None, 0, 1))


PAUSE_PROGRAM = """
import contextlib, torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch_overlay.report.profile import CompilePause

def f(x):
    return torch.sin(x) * 2

def in_compiled_code(event):
    while event is not None and event.name != "CompiledFunction":
        event = event.cpu_parent
    return event is not None

for pause in (False, True):
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager")
    x = torch.randn(4, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with CompilePause(prof, [ProfilerActivity.CPU]).installed() if pause else contextlib.nullcontext():
            for _ in range(3):
                with record_function("step"):
                    compiled(x).sum().backward()
    sin = [e for e in prof.events() if e.name == "aten::sin"]
    print(sum(map(in_compiled_code, sin)), sum(not in_compiled_code(e) for e in sin),
          sum(e.name == "step" for e in prof.events()))
"""


class TestCompilePause(TestCase):
    def test_compilation_is_not_recorded(self):
        """Compiling traces sin with fake tensors under the profiler (events outside the compiled function's
        runs); paused, the profile holds only the steps' runs of the compiled function, and torch's "Toggling CPU
        activity ..." lines (printed on every toggle) are not shown."""
        import subprocess
        import sys

        proc = subprocess.run([sys.executable, "-c", PAUSE_PROGRAM], capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        whole, paused = [[int(n) for n in line.split()] for line in proc.stdout.splitlines()]
        self.assertGreater(whole[1], 0)  # compile-time sin, recorded without the pause
        self.assertGreaterEqual(paused[0], 3)  # each step's sin
        self.assertEqual(paused[1:], [0, 3])
        self.assertNotIn("Toggling", proc.stderr)


class TestPage(TestCase):
    def test_page_names_are_the_report_regions(self):
        def op(name, custom):
            return CapturedOp("", name, "aten.mm.default", 1, custom, False, False)

        report = build_report([CapturedGraph(1, 1, "forward", [op("mm", HEAD), op("mm_1", None)])])
        x = torch.randn(8, 8)

        def body():
            for custom in (HEAD, ATTENTION):
                with scope(custom):
                    x.mm(x)

        times = region_times(profiled(body), known_labels(report))
        self.assertEqual(page_names(times, report), {
            "layer=0, region='head'": repr(HEAD),  # as the coverage table names it
            "region='attention'": "region='attention'",  # not captured: its label
        })

    @staticmethod
    def chrome_trace(body) -> tuple:
        """(the text of the Chrome trace torch writes of ``body``'s profile, the profile's event names)."""
        import tempfile
        from pathlib import Path

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            body()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            return path.read_text(encoding="utf-8"), {e.name for e in prof.events()}

    def test_the_chrome_trace_of_annotation_scopes_opens(self):
        """torch writes an event's name unquoted into the Chrome trace; the scopes' names hold no double quote
        and no backslash, even for an annotation whose value has both: the trace is JSON as torch writes it."""
        odd = {"region": 'say "hi" \\ bye'}
        x = torch.randn(16, 16)

        def body():
            for custom, backward in ((ATTENTION, False), (odd, False), (ATTENTION, True)):
                with scope(custom, backward):
                    x.mm(x)

        text, _ = self.chrome_trace(body)
        trace = json.loads(text)
        scopes = [e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("annotation")]
        self.assertEqual(sorted(scopes), sorted([
            "annotation region='attention'", "annotation region='attention' (backward)",
            "annotation region='say /'hi/' // bye'"]))

    def test_a_quoted_name_of_the_script_is_made_json(self):
        """A scope the script opens itself may hold quotes and backslashes, which torch writes unescaped: once
        quoted, the trace is JSON, with the names intact."""
        mine = 'my "step" \\ 1'
        x = torch.randn(16, 16)

        def body():
            with record_function(mine):
                with scope(ATTENTION):
                    x.mm(x)

        text, names = self.chrome_trace(body)  # no JSON through 2.14; 2.15 writes the name's quotes as '
        trace = json.loads(quote_names(text, {n for n in names if '"' in n or "\\" in n}))
        found = {e["name"] for e in trace["traceEvents"]}
        self.assertIn(mine, found)
        self.assertIn("annotation region='attention'", found)

    def test_page_without_and_with_times(self):
        """No scope ran: the page says so under the trace's name; scopes ran: a table row and a chart group per
        region, named as the coverage table names it."""
        from torch_overlay.report.html import render
        from torch_overlay.report.profile import profile_page

        report = build_report([CapturedGraph(1, 1, "forward", [
            CapturedOp("", "mm", "aten.mm.default", 1, ATTENTION, False, False)])])
        x = torch.randn(8, 8)
        empty = render(report, title="t", details=[], profile=profile_page(profiled(lambda: x.mm(x)), report, "t.json"))
        self.assertIn('id="region-times-none"', empty)
        self.assertIn("<code>t.json</code>", empty)
        self.assertNotIn('class="region-times"', empty)

        def body():
            with scope(ATTENTION):
                x.mm(x)
            with scope(ATTENTION, backward=True):
                x.mm(x)

        page = render(report, title="t", details=[], profile=profile_page(profiled(body), report, "t.json"))
        name = repr(ATTENTION).replace("'", "&#x27;")
        self.assertEqual(page.count(f'<tr class="region-time-row" data-region="{name}">'), 1)
        self.assertEqual(page.count(f'<g class="region-time" data-region="{name}">'), 1)
        self.assertEqual(page.count('class="time-bar '), 2)
        self.assertNotIn('id="region-times-none"', page)

    def test_trace_beside_the_page(self):
        from pathlib import Path

        self.assertEqual(trace_path(Path("out/report.rank1.html")), Path("out/report.rank1.trace.json"))


if __name__ == "__main__":
    run_tests()
