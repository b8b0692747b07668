"""torch._inductor.config.kernel_annotations (local-inductor-kernel-annotations,
beyond upstream): with the flag on, each kernel call and extern call of the
output code names the annotations of the FX nodes it came from
(``# Annotation: {...}``) and runs inside a
``torch.profiler.record_function("annotation key=value, ...[ (backward)]", KERNEL)``
scope; with it off (the default) the output code, the kernel names and the FX
graph cache key are the release's. Upstream (through 2.15) names no region in
the output code or in the profiler events of a compiled step."""
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor import config as inductor_config
from torch._inductor.codecache import compiled_fx_graph_hash, FxGraphHashDetails
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests

REGIONS = ({"region": "attention"}, {"region": "mlp"})


# The scope names of REGIONS: key=value pairs, no double quote, no backslash.
SCOPES = {
    "attention": "annotation region='attention'",
    "mlp": "annotation region='mlp'",
}


def scope(custom, backward=False):
    suffix = " (backward)" if backward else ""
    return SCOPES[custom["region"]] + suffix


class TwoRegions(torch.nn.Module):
    """The issue's block: an attention-like softmax and an MLP, one region each."""

    def __init__(self, annotated=True):
        super().__init__()
        self.annotated = annotated
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def region(self, custom):
        if self.annotated:
            return fx_traceback.annotate(custom)
        return contextlib.nullcontext()

    def forward(self, x):
        with self.region(REGIONS[0]):
            scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.25
            probs = torch.softmax(scores, dim=-1) @ x
        with self.region(REGIONS[1]):
            return self.down(torch.relu(self.up(probs)))


def compile_step(model, **config):
    """The output code (forward, backward) of a compiled training step of model, the
    names of the profiler events of a second step, and the text of its Chrome trace."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(2, 8, 16)
    # fresh_inductor_cache: Inductor's in-process caches cleared, a cache folder of
    # this call's own
    with fresh_inductor_cache(), inductor_config.patch(**config):
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
        cls.on_code, cls.on_events, cls.on_trace = compile_step(
            TwoRegions(), kernel_annotations=True
        )
        cls.off_code, cls.off_events, _ = compile_step(TwoRegions())
        cls.unannotated_code, cls.unannotated_events, _ = compile_step(
            TwoRegions(annotated=False), kernel_annotations=True
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
        # Releases through 2.14 write event names into the Chrome trace unescaped:
        # a scope name holding a double quote would end its JSON string early.
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
            ({}, "{}"),
            ({"b": None, "a": True, "c": 1.5}, "a=true, b=null, c=1.5"),
            # keys of mixed types, in the order of their text
            ({2: "x", "10": [1, 2]}, "10=[1, 2], 2='x'"),
            ({"cfg": {"z": 1, "a": "q"}}, "cfg={'a': 'q', 'z': 1}"),
            # what JSON cannot hold is its repr, as a string
            ({"ids": (1, 2), "f": {1.5}}, "f='{1.5}', ids=[1, 2]"),
            ({"say": 'a "b" \\ c'}, "say='a /'b/' // c'"),
            ({'k"\\': 1}, "k'/=1"),
            ({"tab\tkey": 1}, "tab/tkey=1"),
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

    def test_fx_graph_cache_key_leaves_the_flag_out_while_off(self):
        gm = make_fx(lambda x: torch.relu(x) + 1)(torch.randn(4))
        inputs = [torch.randn(4)]

        def hashed_config():
            return FxGraphHashDetails(gm, inputs, {}, []).inductor_config

        def key():
            return compiled_fx_graph_hash(gm, inputs, {}, [])[0]

        off, off_key = hashed_config(), key()
        with inductor_config.patch(kernel_annotations=True):
            on, on_key = hashed_config(), key()
        # Off, the hashed config is what a torch without the option hashes: every
        # other entry, and no trace of this one.
        self.assertNotIn("kernel_annotations", off)
        self.assertIs(on["kernel_annotations"], True)
        others = {k: v for k, v in on.items() if k != "kernel_annotations"}
        self.assertEqual(off, others)
        # On, the key differs: annotated output code never comes from an entry
        # compiled without it.
        self.assertNotEqual(on_key, off_key)
        self.assertEqual(key(), off_key)

if __name__ == "__main__":
    run_tests()
