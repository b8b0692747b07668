"""torch._inductor.config.kernel_annotations (local-inductor-kernel-annotations,
beyond upstream): with the flag on, each kernel call and extern call of the
output code names the annotations of the FX nodes it came from
(``# Annotation: {...}``) and runs inside a
``torch.profiler.record_function("annotation key=value, ...[ (backward)]", KERNEL)``
scope; with it off (the default) the output code and the kernel names are the
release's, and an FX graph cache entry made with it off is found again with it
off. Upstream (through 2.15) names no region in the output code or in the
profiler events of a compiled step."""
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.testing._internal.common_utils import TestCase, run_tests

from annotated_block import AnnotatedBlock
from inductor_caches import fresh_graphs

REGIONS = ({"region": "attention"}, {"region": "mlp"})


# The scope names of REGIONS: key=value pairs, no double quote, no backslash.
SCOPES = {
    "attention": "annotation region='attention'",
    "mlp": "annotation region='mlp'",
}


def scope(custom, backward=False):
    suffix = " (backward)" if backward else ""
    return SCOPES[custom["region"]] + suffix


def two_regions(annotated=True):
    """The block of test/annotated_block.py in two regions: "attention" (its scale and
    softmax parts) and "mlp"."""
    regions = {"scale": REGIONS[0], "attention": REGIONS[0], "mlp": REGIONS[1]}
    return AnnotatedBlock(regions, annotated)


def compile_step(model, **config):
    """The output code (forward, backward) of a compiled training step of model, the
    names of the profiler events of a second step, and the text of its Chrome trace.
    Call it inside fresh_graphs(): the code is generated anew, never read from a cache."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(2, 8, 16)
    with inductor_config.patch(**config):
        compiled = torch.compile(model, backend="inductor")
        _, code = run_and_get_code(lambda: compiled(x).sum().backward())
        with torch.profiler.profile() as prof:
            compiled(x).sum().backward()
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = f.read()
    return code, [event.name for event in prof.events()], trace


def kernel_names(code):
    """The generated kernels and extern calls a wrapper calls, in call order."""
    call = r"^\s*((?:cpp_fused|triton_)\w+|extern_kernels\.\w+)\("
    return re.findall(call, code, flags=re.MULTILINE)


class TestKernelAnnotations(TestCase):
    @classmethod
    def setUpClass(cls):
        # Three compiled training steps for every test (C++ builds are slow on CI).
        super().setUpClass()
        with fresh_graphs():
            cls.on_code, cls.on_events, cls.on_trace = compile_step(
                two_regions(), kernel_annotations=True
            )
            cls.off_code, cls.off_events, _ = compile_step(two_regions())
            cls.unannotated_code, cls.unannotated_events, _ = compile_step(
                two_regions(annotated=False), kernel_annotations=True
            )

    def test_flag_is_off_by_default_and_read_from_the_environment(self):
        self.assertFalse(inductor_config.kernel_annotations)
        read = "import torch._inductor.config as c; print(c.kernel_annotations)"
        for value, expected in (("1", "True"), ("0", "False")):
            env = {**os.environ, "TORCHINDUCTOR_KERNEL_ANNOTATIONS": value}
            out = subprocess.run(
                [sys.executable, "-c", read],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            self.assertEqual(out.stdout.strip(), expected)

    def test_output_code_names_both_regions(self):
        self.assertEqual(len(self.on_code), 2)
        for code in self.on_code:
            # a kernel fused across the two regions names both: "<json1>; <json2>"
            comments = re.findall(r"# Annotation: (.*)$", code, flags=re.MULTILINE)
            named = {part for comment in comments for part in comment.split("; ")}
            expected = {json.dumps(custom, sort_keys=True) for custom in REGIONS}
            self.assertEqual(named, expected)

    def test_every_call_runs_in_its_region_scope(self):
        # Every kernel and extern call of this fully annotated block has a scope,
        # and its comment sits inside the scope, beside the call.
        for code, backward in zip(self.on_code, (False, True)):
            calls = kernel_names(code)
            self.assertTrue(calls)
            # the name's repr: in double quotes, as it holds single ones
            scope_line = (
                r"^( *)with torch\.profiler\.record_function\("
                r"\"([^\"]*)\", '([^']*)'\):\n"
                r"\1    # .*\n"
            )
            scopes = re.findall(scope_line, code, flags=re.MULTILINE)
            self.assertEqual([kernel for _, _, kernel in scopes], calls)
            names = {name for _, name, _ in scopes}
            self.assertEqual(names, {scope(custom, backward) for custom in REGIONS})

    def test_profiler_events_name_both_regions_forward_and_backward(self):
        named = {name for name in self.on_events if name.startswith("annotation ")}
        expected = {
            scope(custom, backward) for custom in REGIONS for backward in (False, True)
        }
        self.assertEqual(named, expected)

    def test_chrome_trace_is_json_and_names_both_regions(self):
        # A scope name holding a double quote or a backslash would not survive
        # the Chrome trace writer as it is.
        trace = json.loads(self.on_trace)
        named = {
            event["name"]
            for event in trace["traceEvents"]
            if event.get("name", "").startswith("annotation ")
        }
        expected = {
            scope(custom, backward) for custom in REGIONS for backward in (False, True)
        }
        self.assertEqual(named, expected)

    def test_scope_names_hold_no_double_quote_or_backslash(self):
        from torch._inductor.kernel_annotations import scope_label

        cases = [
            ({"ac_region_id": 0}, "ac_region_id=0"),
            ({"stage": "attn", "layer": 3}, "layer=3, stage='attn'"),
            ({"b": None, "a": True, "c": 1.5}, "a=true, b=null, c=1.5"),
            # keys of mixed types, in the order of their text
            ({2: "x", "10": [1, 2]}, "10=[1, 2], 2='x'"),
            ({"cfg": {"z": 1, "a": "q"}}, "cfg={'a': 'q', 'z': 1}"),
            # what JSON cannot hold is its repr, as a string
            ({"ids": (1, 2), "f": {1.5}}, "f='{1.5}', ids=[1, 2]"),
            ({"say": 'a "b" \\ c'}, "say='a /'b/' // c'"),
            ({'k"\\': 1}, "k'/=1"),
            ({"tab\tkey": 1}, "tab/tkey=1"),
            # beyond ASCII: as it is, in keys and values alike
            ({"région": "café"}, "région='café'"),
        ]
        for custom, expected in cases:
            self.assertEqual(scope_label(custom), expected)

    def test_kernel_names_do_not_change(self):
        self.assertEqual(
            [kernel_names(c) for c in self.on_code],
            [kernel_names(c) for c in self.off_code],
        )

    def test_flag_off_writes_nothing(self):
        for code in self.off_code:
            self.assertNotIn("# Annotation", code)
            self.assertNotIn("record_function", code)
            self.assertNotIn('"annotation ', code)
        named = [name for name in self.off_events if name.startswith("annotation")]
        self.assertEqual(named, [])

    def test_flag_on_without_annotations_writes_nothing(self):
        for code in self.unannotated_code:
            self.assertNotIn("# Annotation", code)
            self.assertNotIn("record_function", code)
        events = self.unannotated_events
        self.assertEqual([name for name in events if name.startswith("annotation")], [])

    def test_an_extern_call_with_its_own_profile_scope_gets_one_scope(self):
        # x[bool_mask] = v is an extern index_put_, whose line opens a profile
        # scope of its own inside the scope of its extern call.
        def put(x, mask, v):
            with fx_traceback.annotate({"region": "put"}):
                y = x.clone()
                y[mask] = v
                return y * 2

        args = (
            torch.randn(4, 8),
            torch.tensor([True, False, True, False]),
            torch.randn(8),
        )
        torch._dynamo.reset()
        with fresh_inductor_cache(), inductor_config.patch(kernel_annotations=True):
            compiled = torch.compile(put, backend="inductor")
            _, (code,) = run_and_get_code(compiled, *args)
            with torch.profiler.profile() as prof:
                compiled(*args)
        torch._dynamo.reset()
        call = r"^\s*((?:cpp_fused|triton_)\w+|extern_kernels\.\w+|aten\.\w+)\("
        calls = re.findall(call, code, flags=re.MULTILINE)
        self.assertIn("aten.index_put_", calls)
        scopes = re.findall(
            r"record_function\(.*, '([^']*)'\):$", code, flags=re.MULTILINE
        )
        self.assertEqual(scopes, calls)
        self.assertEqual(len(re.findall(r"# Annotation: ", code)), len(calls))
        events = [e.name for e in prof.events() if e.name == "annotation region='put'"]
        self.assertEqual(len(events), len(calls))

    def test_fx_graph_cache_finds_an_entry_made_with_the_same_flag(self):
        # Off, then on: a miss each (annotated output code never comes from an
        # entry compiled without it); then off and on again: a hit each.
        def f(x):
            with fx_traceback.annotate({"region": "relu"}):
                return torch.relu(x) + 1

        x = torch.randn(4)
        seen = []
        with (
            fresh_inductor_cache(),
            inductor_config.patch(fx_graph_cache=True),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            for flag in (False, True, False, True):
                torch._dynamo.reset()
                counters.clear()
                with inductor_config.patch(kernel_annotations=flag):
                    torch.compile(f, backend="inductor")(x)
                inductor = counters["inductor"]
                seen.append(
                    (inductor["fxgraph_cache_miss"], inductor["fxgraph_cache_hit"])
                )
        torch._dynamo.reset()
        self.assertEqual(seen, [(1, 0), (1, 0), (0, 1), (0, 1)])

    def test_keys_of_mixed_types_inside_a_value_compile_and_are_named(self):
        # Keys that cannot be sorted (int and str), one level down: the
        # comment and the keys of both caches write them in the order of
        # their text.
        def f(x):
            with fx_traceback.annotate({"cfg": {1: "a", "b": 2}}):
                return torch.relu(x) + 1

        torch._dynamo.reset()
        with (
            fresh_inductor_cache(),
            inductor_config.patch(kernel_annotations=True, fx_graph_cache=True),
            functorch_config.patch(enable_autograd_cache=True),
        ):
            compiled = torch.compile(f, backend="inductor")
            _, (code,) = run_and_get_code(compiled, torch.randn(4))
            with torch.profiler.profile() as prof:
                compiled(torch.randn(4))
        torch._dynamo.reset()
        self.assertIn('# Annotation: {"cfg": {"1": "a", "b": 2}}\n', code)
        names = [e.name for e in prof.events() if e.name.startswith("annotation ")]
        self.assertEqual(names, ["annotation cfg='{1: 'a', 'b': 2}'"])

    def test_comment_text_of_keys_json_cannot_sort_or_hold(self):
        from torch._inductor.kernel_annotations import annotation_json

        inner = {"z": 1}
        inner["self"] = inner
        cases = [
            ({"b": 1, "a": {"d": 2, "c": 3}}, '{"a": {"c": 3, "d": 2}, "b": 1}'),
            ({2: "x", "10": 1}, '{"10": 1, "2": "x"}'),
            ({"cfg": {1: "a", "b": 2}}, '{"cfg": {"1": "a", "b": 2}}'),
            ({"l": [{True: 1, "a": None}]}, '{"l": [{"a": null, "true": 1}]}'),
            ({"t": {(1, 2): "p", "q": 0}}, '{"t": {"(1, 2)": "p", "q": 0}}'),
            # a value that holds itself: its repr where it comes again
            (
                {"i": inner, 0: 1},
                '{"0": 1, "i": {"self": "' + repr(inner) + '", "z": 1}}',
            ),
        ]
        for custom, expected in cases:
            self.assertEqual(annotation_json(custom), expected)

    def test_kernel_annotations_follow_a_graph_edited_in_place(self):
        # Moving a node changes the order of the graph's annotated nodes,
        # not their count: the next kernel's comment follows the new order.
        from torch._inductor.kernel_annotations import annotated_origins

        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        first = graph.call_function(torch.relu, (x,))
        second = graph.call_function(torch.neg, (x,))
        graph.output((first, second))
        first.meta["custom"] = {"region": "first"}
        second.meta["custom"] = {"region": "second"}
        self.assertEqual(annotated_origins({second, first}), [first, second])
        first.prepend(second)
        self.assertEqual(annotated_origins({second, first}), [second, first])


if __name__ == "__main__":
    run_tests()
