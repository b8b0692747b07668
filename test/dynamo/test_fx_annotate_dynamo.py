# Owner(s): ["module: dynamo"]
"""torch.fx.traceback.annotate under torch.compile (patches 164916-dynamo-annotate,
local-dynamo-context-decorator, local-dynamo-annotate-graph-break and
local-dynamo-ambient-annotation, opt-in): Dynamo runs annotate eagerly, so its graph nodes --
HOP subgraphs included -- carry node.meta["custom"], which flows into the AOT forward graph.
No test enters preserve_node_meta(): Dynamo must not need it.
"""
import collections
import enum
import sys
import types
from pathlib import Path

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch.testing._internal.common_utils import run_tests, TestCase
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from graph_capture import graph_modules, meta_table, RecordGraphs  # noqa: E402
from oracle_interpreter import oracle_json, requires_oracle, run_json  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE_PROGRAM = REPO / "test" / "oracle" / "programs" / "dynamo_annotate_program.py"
NODE_OPS = ("call_function", "call_method", "call_module", "get_attr")


def dynamo_table(gm):
    """``subgraph.node|custom`` for every call/get_attr node of a Dynamo graph and its subgraphs."""
    lines = []
    for sub, g in graph_modules(gm):
        prefix = f"{sub}." if sub else ""
        lines += [f"{prefix}{n.name}|{n.meta.get('custom', '')}" for n in g.graph.nodes if n.op in NODE_OPS]
    return "\n".join(lines)


class Capture:
    """A torch.compile backend that keeps the Dynamo graphs and, through RecordGraphs, the AOT graphs."""

    def __init__(self):
        self.dynamo_graphs = []
        self.custom_seen_by_backend = []
        self.aot = RecordGraphs()
        self._aot_backend = self.aot.backend

    def __call__(self, gm, example_inputs):
        self.dynamo_graphs.append(gm)
        self.custom_seen_by_backend.append(fx_traceback.get_current_meta().get("custom"))
        return self._aot_backend(gm, example_inputs)


def ac_body(x):
    with fx_traceback.annotate({"inner": 1}):
        y = x.sin()
    return y.cos()


@fx_traceback.annotate({"deco": 1})
def decorated(x):
    return x * 3


@fx_traceback.annotate_fn({"fn": 2})
def decorated_fn(x):
    return x - 3


class DecoratedModule(torch.nn.Module):
    @fx_traceback.annotate_fn({"mod": 3})
    def forward(self, x):
        return decorated(x) + decorated_fn(x)


class ScaledSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with fx_traceback.annotate({"region": "forward"}):
            y = x * 3
        ctx.save_for_backward(y)
        return y.sin()

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y.cos() * 3


class Stage(enum.Enum):
    A = "a"


def cos_customs_as_the_dict_changes(key, value_of, first=0):
    """The custom of the cos in each graph Dynamo makes of a call of a function decorated with
    annotate_fn(dec), while dec[key] takes value_of(0), value_of(1), value_of(2), value_of(2)."""
    dec = {key: first}

    @fx_traceback.annotate_fn(dec)
    def decorated_cos(x):
        return x.cos()

    cap = Capture()
    compiled = torch.compile(lambda x: decorated_cos(x) + 1, backend=cap, fullgraph=True)
    for stage in (0, 1, 2, 2):
        dec[key] = value_of(stage)
        compiled(torch.randn(4))
    return [gm.graph.find_nodes(op="call_method", target="cos")[0].meta["custom"] for gm in cap.dynamo_graphs]


def annotated_rows(graphs):
    """``name|custom`` of the call nodes of each graph, graphs separated by ``--``."""
    return "\n--\n".join(dynamo_table(g) for g in graphs)


class AnnotateDynamoTests(TestCase):
    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()
        super().tearDown()

    def compile_and_run(self, fn, *args, fullgraph=False, backward=True, **compile_kwargs):
        cap = Capture()
        compiled = torch.compile(fn, backend=cap, fullgraph=fullgraph, **compile_kwargs)
        out = compiled(*args)
        self.assertEqual(out, fn(*args))
        if backward:
            out.sum().backward()
        return cap

    def assert_tracing_state_clean(self):
        self.assertNotIn("custom", fx_traceback.current_meta)
        self.assertFalse(fx_traceback.has_preserved_node_meta())

    def assert_no_annotation_on_inputs_and_outputs(self, cap):
        """AOT graph inputs and outputs belong to no region; they carry ``custom`` only
        if the backend compiled while an annotation was still active."""
        for gm in cap.aot.fw_graphs + cap.aot.bw_graphs:
            for n in gm.graph.nodes:
                if n.op in ("placeholder", "output"):
                    self.assertNotIn("custom", n.meta, f"{n.op} {n.name}")

    def test_nested_annotations_reach_dynamo_and_aot_forward_graphs(self):
        def f(x):
            with fx_traceback.annotate({"pp_stage": 0}):
                with fx_traceback.annotate({"fsdp_bucket": 1, "pp_stage": 9}):
                    y = x.sin()
                y = y * 2
            return y.cos()

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True), fullgraph=True)
        self.assertEqual(len(cap.dynamo_graphs), 1)
        self.assertExpectedInline(dynamo_table(cap.dynamo_graphs[0]), """\
y|{'pp_stage': 9, 'fsdp_bucket': 1}
y_1|{'pp_stage': 0}
cos|""")
        self.assertExpectedInline(meta_table(cap.aot.fw_graphs[0], columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.sin.default|{'pp_stage': 9, 'fsdp_bucket': 1}
aten.mul.Tensor|{'pp_stage': 0}
aten.cos.default|""")
        self.assert_tracing_state_clean()

    def test_decorator_forms_annotate_and_annotate_fn(self):
        cap = self.compile_and_run(DecoratedModule(), torch.randn(4, requires_grad=True), fullgraph=True)
        self.assertEqual(len(cap.dynamo_graphs), 1)
        self.assertExpectedInline(dynamo_table(cap.dynamo_graphs[0]), """\
mul|{'mod': 3, 'deco': 1}
sub|{'mod': 3, 'fn': 2}
add|{'mod': 3}""")
        self.assertExpectedInline(meta_table(cap.aot.fw_graphs[0], columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.mul.Tensor|{'mod': 3, 'deco': 1}
aten.sub.Tensor|{'mod': 3, 'fn': 2}
aten.add.Tensor|{'mod': 3}""")
        self.assert_no_annotation_on_inputs_and_outputs(cap)
        self.assert_tracing_state_clean()

    def test_decorated_module_methods(self):
        class Mod(torch.nn.Module):
            @fx_traceback.annotate({"bucket": 0})
            def sin(self, x):
                return torch.sin(x)

            @fx_traceback.annotate_fn({"bucket": 1})
            def cos(self, x):
                return torch.cos(x)

            def forward(self, x):
                with fx_traceback.annotate({"pp_stage": 0}):
                    y = self.sin(x) * 2
                return self.cos(y) / 3

        cap = self.compile_and_run(Mod(), torch.randn(4, requires_grad=True), fullgraph=True)
        self.assertExpectedInline(dynamo_table(cap.dynamo_graphs[0]), """\
sin|{'pp_stage': 0, 'bucket': 0}
y|{'pp_stage': 0}
cos|{'bucket': 1}
truediv|""")
        self.assert_tracing_state_clean()

    def test_decorator_dicts_are_guarded(self):
        dec, dec_fn = {"stage": "a"}, {"stage": "a"}

        @fx_traceback.annotate(dec)
        def by_annotate(x):
            return x.sin()

        @fx_traceback.annotate_fn(dec_fn)
        def by_annotate_fn(x):
            return x.cos()

        def f(x):
            return by_annotate(x) + by_annotate_fn(x)

        cap = Capture()
        compiled = torch.compile(f, backend=cap, fullgraph=True)
        x = torch.randn(4)
        compiled(x)
        dec["stage"] = "b"
        compiled(x)
        dec_fn["stage"] = "c"
        compiled(x)
        compiled(x)
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
sin|{'stage': 'a'}
cos|{'stage': 'a'}
add|
--
sin|{'stage': 'b'}
cos|{'stage': 'a'}
add|
--
sin|{'stage': 'b'}
cos|{'stage': 'c'}
add|""")

    def test_changed_int_in_a_decorator_dict_stays_a_constant(self):
        # beyond upstream (2.13 raises an internal error): an int that changed between
        # calls becomes dynamic in Dynamo (automatic dynamic); the annotation holds its value
        self.assertEqual(cos_customs_as_the_dict_changes("stage", lambda s: s),
                         [{"stage": 0}, {"stage": 1}, {"stage": 2}])

    def test_nested_values_of_a_decorator_dict_stay_constants(self):
        # Dynamo builds the values of a guarded dict lazily: a nested dict or list must
        # be read as one (not refused as "not a constant"), a changed int in it as its value
        for first, changed in (({"stage": 0}, lambda s: {"stage": s}), ([0, 1], lambda s: [0, s])):
            torch._dynamo.reset()
            self.assertEqual(cos_customs_as_the_dict_changes("m", changed, first=first),
                             [{"m": changed(s)} for s in (0, 1, 2)])

    def test_nested_ordered_dict_of_a_decorator_dict_stays_a_constant(self):
        # a nested OrderedDict is read as a nested dict is (review rf3), of its own type as in eager
        def changed(stage):
            return collections.OrderedDict(stage=stage)

        torch._dynamo.reset()
        customs = cos_customs_as_the_dict_changes("m", changed, first=changed(0))
        self.assertEqual(customs, [{"m": changed(s)} for s in (0, 1, 2)])
        self.assertEqual([type(custom["m"]) for custom in customs], [collections.OrderedDict] * 3)

    def test_nested_defaultdict_keeps_its_type_and_default_factory(self):
        # eager annotate shares a nested value, so a defaultdict stays one: the compiled annotation holds a
        # defaultdict with the same items and default_factory, whether the frame built it or reads a global
        held = collections.defaultdict(list, stage=[0])

        def f(x):
            built = collections.defaultdict(dict)
            built["n"] = 1
            with fx_traceback.annotate({"held": held, "built": built}):
                return x.cos()

        cap = self.compile_and_run(f, torch.randn(4), fullgraph=True, backward=False)
        (custom,) = [n.meta.get("custom") for n in cap.dynamo_graphs[0].graph.nodes if n.op in NODE_OPS]
        self.assertEqual(custom, {"held": {"stage": [0]}, "built": {"n": 1}})
        self.assertEqual([(type(custom[k]), custom[k].default_factory) for k in ("held", "built")],
                         [(collections.defaultdict, list), (collections.defaultdict, dict)])
        self.assert_tracing_state_clean()

    def test_nested_dict_subclass_is_a_graph_break_naming_its_key_path(self):
        # eager annotate keeps a nested dict subclass as it is; a copy of another type would not be what eager
        # records, so it is the graph break naming where it sits (an error under fullgraph=True)
        class Held(dict):
            pass

        class Built(collections.OrderedDict):
            pass

        held = Held(stage=0)

        def by_held(x):
            with fx_traceback.annotate({"m": [held]}):
                return x.cos()

        def by_built(x):
            with fx_traceback.annotate({"m": {"n": Built(stage=0)}}):
                return x.cos()

        for fn, path in ((by_held, r"\['m'\]\[0\]"), (by_built, r"\['m'\]\['n'\]")):
            with self.subTest(fn.__name__):
                torch._dynamo.reset()
                with self.assertRaisesRegex(torch._dynamo.exc.Unsupported,
                                            rf"annotation value at {path} is (Held|Built)"):
                    torch.compile(fn, backend="eager", fullgraph=True)(torch.randn(4))
        self.assert_tracing_state_clean()

    def test_rebinding_a_decorated_function_recompiles(self):
        # every @annotate(d) wrapper shares contextlib's code object: rebinding the name
        # to another annotated function must not reuse the graph of the first one
        def sin(x):
            return x.sin()

        def cos(x):
            return x.cos()

        scope = {"g": fx_traceback.annotate({"stage": 0})(sin)}
        exec("def f(x):\n    return g(x) + 1", scope)
        cap = Capture()
        compiled = torch.compile(scope["f"], backend=cap, fullgraph=True)
        x = torch.randn(4)
        compiled(x)
        scope["g"] = fx_traceback.annotate({"stage": 1})(sin)
        self.assertEqual(compiled(x), x.sin() + 1)
        scope["g"] = fx_traceback.annotate({"stage": 1})(cos)
        self.assertEqual(compiled(x), x.cos() + 1)
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
sin|{'stage': 0}
add|
--
sin|{'stage': 1}
add|
--
cos|{'stage': 1}
add|""")

    def test_annotate_variable_clones(self):
        from torch._dynamo.variables import FxTracebackAnnotateVariable

        var = FxTracebackAnnotateVariable({"stage": 0})
        clone = var.clone()
        if not hasattr(var, "annotation"):  # 2.13 keeps the annotation in target_values (2.14 moved it)
            self.assertEqual(clone.target_values, {"stage": 0})
            return
        self.assertEqual(clone.annotation, {"stage": 0})
        self.assertIn(clone.target_values, (None, ()))  # upstream (2.14+) keeps (), the 2.5.1 backport None
        self.assertEqual(clone.target_values, var.target_values)

    def test_annotate_around_and_inside_checkpoint(self):
        def f(x):
            with fx_traceback.annotate({"ac_region_id": 0}):
                z = checkpoint(ac_body, x, use_reentrant=False)
            return z + 1

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True), fullgraph=True)
        # the HOP node, the get_attr holding its body, and the body nodes are annotated
        self.assertExpectedInline(dynamo_table(cap.dynamo_graphs[0]), """\
wrap_body_0|{'ac_region_id': 0}
tag_activation_checkpoint|{'ac_region_id': 0}
z|{'ac_region_id': 0}
add|
wrap_body_0.y|{'ac_region_id': 0, 'inner': 1}
wrap_body_0.cos|{'ac_region_id': 0}""")
        self.assertExpectedInline(meta_table(cap.aot.fw_graphs[0], columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.sin.default|{'ac_region_id': 0, 'inner': 1}
aten.cos.default|{'ac_region_id': 0}
aten.add.Tensor|""")

    def test_annotate_inside_autograd_function_forward(self):
        # Dynamo captures the Function as autograd_function_apply; AOT autograd traces its forward body
        # again, and each op keeps the annotation of its node in that body (upstream 2.10+, PR 169528).
        def f(x):
            with fx_traceback.annotate({"region": "apply", "block": 0}):
                return ScaledSin.apply(x + 1)

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True), fullgraph=True)
        self.assertExpectedInline(meta_table(cap.aot.fw_graphs[0], columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.add.Tensor|{'region': 'apply', 'block': 0}
aten.mul.Tensor|{'region': 'forward', 'block': 0}
aten.sin.default|{'region': 'apply', 'block': 0}""")

    def test_flex_attention_score_and_mask_subgraphs(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def score_mod(score, b, h, q, kv):
            return score * 2

        def causal(b, h, q, kv):
            return q >= kv

        block_mask = create_block_mask(causal, 1, 1, 128, 128, device="cpu")

        def f(q, k, v):
            with fx_traceback.annotate({"attn": 0}):
                return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

        q, k, v = (torch.randn(1, 1, 128, 8) for _ in range(3))
        cap = self.compile_and_run(f, q, k, v, fullgraph=True, backward=False)
        gm = cap.dynamo_graphs[0]
        flex = [n for n in gm.graph.nodes if n.op == "call_function" and "flex_attention" in str(n.target)]
        self.assertEqual(len(flex), 1)
        self.assertEqual(flex[0].meta["custom"], {"attn": 0})
        subgraph_names = {a.target for a in flex[0].all_input_nodes if a.op == "get_attr"}
        self.assertGreaterEqual(len(subgraph_names), 2)  # score_mod and mask_mod graphs
        for name in subgraph_names:
            holder = next(n for n in gm.graph.nodes if n.op == "get_attr" and n.target == name)
            self.assertEqual(holder.meta["custom"], {"attn": 0}, name)
            body = [n for n in getattr(gm, name).graph.nodes if n.op == "call_function"]
            self.assertTrue(body, name)
            self.assertTrue(all(n.meta.get("custom") == {"attn": 0} for n in body), name)

    def test_graph_break_inside_annotate_compiles_both_sides(self):
        def f(x):
            with fx_traceback.annotate({"region": 0, "cfg": {"lr": [1, 2]}}):
                a = x.sin()
                torch._dynamo.graph_break()
                b = a.cos()
            return b + 1

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True))
        self.assertEqual(len(cap.dynamo_graphs), 2)
        self.assertExpectedInline("\n--\n".join(dynamo_table(g) for g in cap.dynamo_graphs), """\
a|{'region': 0, 'cfg': {'lr': [1, 2]}}
--
b|{'region': 0, 'cfg': {'lr': [1, 2]}}
add|""")
        self.assertExpectedInline("\n--\n".join(
            meta_table(g, columns=("OrigAten", "custom")) for g in cap.aot.fw_graphs), """\
OrigAten|custom
aten.sin.default|{'region': 0, 'cfg': {'lr': [1, 2]}}
--
OrigAten|custom
aten.cos.default|{'region': 0, 'cfg': {'lr': [1, 2]}}
aten.add.Tensor|""")
        # the first side is compiled while tracing is still inside the block: the backend
        # must not see the block's annotation (it would stamp it on every node it creates)
        self.assert_no_annotation_on_inputs_and_outputs(cap)
        self.assert_tracing_state_clean()

    def test_graph_break_keeps_enum_and_class_values(self):
        def f(x):
            with fx_traceback.annotate({"stage": Stage.A, "cls": int}):
                a = x.sin()
                torch._dynamo.graph_break()
                b = a.cos()
            return b + 1

        cap = Capture()
        compiled = torch.compile(f, backend=cap)
        x = torch.randn(4)
        for _ in range(3):
            self.assertEqual(compiled(x), f(x))
        # both sides compile once, annotated with the very objects of the annotation
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
a|{'stage': <Stage.A: 'a'>, 'cls': <class 'int'>}
--
b|{'stage': <Stage.A: 'a'>, 'cls': <class 'int'>}
add|""")
        self.assertIs(cap.dynamo_graphs[1].graph.find_nodes(op="call_method", target="cos")[0]
                      .meta["custom"]["stage"], Stage.A)
        self.assert_tracing_state_clean()

    def test_graph_break_inside_a_stream_context_takes_no_annotation(self):
        # From 2.10 Dynamo's stream context subclasses the annotate variable (its annotation:
        # {"stream": index}). Resuming after a graph break is annotate's own: a break inside
        # `with stream:` leaves the frame as on the pristine release, and no code around the
        # break runs under an annotation instead of the stream
        try:
            stream = torch.Stream(device="cpu")
        except (AttributeError, RuntimeError, TypeError):
            stream = None
        if stream is None or not hasattr(stream, "__enter__"):
            self.skipTest("torch.Stream has no context on this release")
        seen = []

        @torch._dynamo.disable
        def look(tag):
            seen.append((tag, fx_traceback.current_meta.get("custom")))

        def f(x):
            with stream:
                look("before")
                a = x.sin()
                torch._dynamo.graph_break()
                look("after")
                b = a.cos()
            return b + 1

        cap = Capture()
        x = torch.randn(4)
        self.assertEqual(torch.compile(f, backend=cap)(x), x.sin().cos() + 1)
        self.assertEqual(seen, [("before", None), ("after", None)])
        self.assertEqual([dynamo_table(g) for g in cap.dynamo_graphs if "{" in dynamo_table(g)], [])
        self.assert_tracing_state_clean()

    def test_recompile_with_dynamic_shapes_keeps_annotation(self):
        def f(x):
            with fx_traceback.annotate({"r": 0}):
                y = x.sin() * x.shape[0]
            return y + 1

        cap = Capture()
        compiled = torch.compile(f, backend=cap)
        for n in (4, 5, 6, 5):
            x = torch.randn(n)
            self.assertEqual(compiled(x), f(x))
        # static first, one recompile to dynamic, then cache hits: annotate adds no failing guard
        self.assertEqual(len(cap.dynamo_graphs), 2)
        self.assertTrue(any(isinstance(v, torch.SymInt) for n in cap.dynamo_graphs[1].graph.nodes
                            if n.op == "placeholder" for v in [n.meta.get("example_value")]))
        for gm in cap.dynamo_graphs:
            self.assertEqual([n.meta.get("custom") for n in gm.graph.nodes if n.op in NODE_OPS],
                             [{"r": 0}, {"r": 0}, None])
        for fw in cap.aot.fw_graphs:
            customs = [n.meta.get("custom") for n in fw.graph.nodes if n.op == "call_function"]
            self.assertEqual(customs, [{"r": 0}, {"r": 0}, None])

    @torch._dynamo.config.patch(trace_under_caller_annotation=True)  # beyond upstream, opt-in
    def test_eager_annotate_around_compiled_call_is_traced_and_guarded(self):
        def f(x):
            return x.sin().cos()

        cap = Capture()
        compiled = torch.compile(f, backend=cap)
        x = torch.randn(4, requires_grad=True)
        with fx_traceback.annotate({"outer": 1}):
            compiled(x).sum().backward()
            # compiling left the caller's annotation as it was
            self.assertEqual(fx_traceback.get_current_meta()["custom"], {"outer": 1})
        # the backend compiles outside the caller's annotation: its own tracing takes
        # custom from each Dynamo node only
        self.assertEqual(cap.custom_seen_by_backend, [None])
        # every node traced for the call carries the caller's annotation, forward and
        # backward; AOT graph inputs and outputs stand for no op of the block
        self.assertExpectedInline(dynamo_table(cap.dynamo_graphs[0]), """\
sin|{'outer': 1}
cos|{'outer': 1}""")
        self.assertEqual([n.meta.get("custom") for n in cap.aot.fw_graphs[0].graph.nodes
                          if n.op == "call_function"], [{"outer": 1}] * 2)
        bw_calls = [n for n in cap.aot.bw_graphs[0].graph.nodes if n.op == "call_function"]
        self.assertTrue(bw_calls)
        self.assertTrue(all(n.meta.get("custom") == {"outer": 1} for n in bw_calls))
        # the backend compiled outside the caller's annotation: the forward inputs and
        # every output stand for no annotated op
        fw, bw = cap.aot.fw_graphs[0].graph, cap.aot.bw_graphs[0].graph
        for n in [*fw.find_nodes(op="placeholder"), *fw.find_nodes(op="output"), *bw.find_nodes(op="output")]:
            self.assertNotIn("custom", n.meta, n.name)
        self.assert_tracing_state_clean()

        # the graph is guarded on the caller's annotation: no annotation, another one,
        # then the first again (a cache hit)
        compiled(x)
        with fx_traceback.annotate({"outer": 2}):
            compiled(x)
        with fx_traceback.annotate({"outer": 1}):
            compiled(x)
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
sin|{'outer': 1}
cos|{'outer': 1}
--
sin|
cos|
--
sin|{'outer': 2}
cos|{'outer': 2}""")
        self.assert_tracing_state_clean()

    def test_graph_break_in_helper_resumed_inside_nested_annotate_blocks(self):
        """A helper with a graph break inside annotate, called once plainly and then inside two
        nested annotate blocks: its second break is met in a resume function, inside two blocks.
        Dynamo before 2.10 cannot make a resume function there (a KeyError remapping the blocks,
        with nested torch.enable_grad() blocks too); where annotate is involved the frame runs
        eagerly, as upstream runs every frame with a graph break inside annotate, never an
        internal error. From 2.10 both sides compile."""
        def helper(x):
            with fx_traceback.annotate({"h": 1}):
                doubled = x * 2
                torch._dynamo.graph_break()
                shifted = doubled + 1
            return shifted

        def f(x):
            y = helper(x)
            with fx_traceback.annotate({"a": 1}):
                with fx_traceback.annotate({"b": 2}):
                    y = helper(y)
            return y.sin()

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True))
        # the plain call compiles both sides of the helper's break, annotated
        rows = "\n".join(dynamo_table(g) for g in cap.dynamo_graphs).splitlines()
        self.assertIn("doubled|{'h': 1}", rows)
        self.assertIn("shifted|{'h': 1}", rows)
        self.assert_tracing_state_clean()

    @torch._dynamo.config.patch(trace_under_caller_annotation=True)  # beyond upstream, opt-in
    def test_graph_break_in_function_called_from_annotated_block(self):
        def inner(x):
            a = x.sin()
            torch._dynamo.graph_break()
            return a.cos()

        def f(x):
            with fx_traceback.annotate({"region": 0}):
                y = inner(x)
            return y + 1

        cap = self.compile_and_run(f, torch.randn(4, requires_grad=True))
        # inner cannot be inlined: it runs eagerly inside the block, and its own frame and
        # resume function are compiled under the block's annotation
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
a|{'region': 0}
--
cos|{'region': 0}
--
add|""")
        # called outside the block, inner is compiled again, unannotated
        torch.compile(inner, backend=cap)(torch.randn(4))
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs[3:]), """\
a|
--
cos|""")
        self.assert_no_annotation_on_inputs_and_outputs(cap)
        self.assert_tracing_state_clean()

    def test_annotation_as_pairs_compiles_as_in_eager(self):
        # annotate takes anything dict() takes, as in eager: pairs in a list or tuple,
        # given inline or held by an annotate_fn decorator
        pairs = [("stage", 0), ["cfg", {"lr": [1, 2]}], ("stage", 1)]

        @fx_traceback.annotate_fn(tuple(pairs))
        def g(x):
            return x.cos()

        def f(x):
            with fx_traceback.annotate([("k", 1)]):
                y = x.sin()
            return g(y) + 1

        cap = self.compile_and_run(f, torch.randn(4), fullgraph=True, backward=False)
        self.assertExpectedInline(annotated_rows(cap.dynamo_graphs), """\
y|{'k': 1}
cos|{'stage': 1, 'cfg': {'lr': [1, 2]}}
add|""")
        self.assert_tracing_state_clean()

    def test_non_constant_annotation_is_a_clear_error(self):
        def f(x, t):
            with fx_traceback.annotate({"weights": t}):
                return x + 1

        # a Dynamo graph break (an error under fullgraph=True) naming the key path (local-dynamo-annotation-constants)
        with self.assertRaisesRegex(torch._dynamo.exc.Unsupported,
                                    r"annotation value at \['weights'\] is Tensor, not a compile-time constant"):
            torch.compile(f, backend="eager", fullgraph=True)(torch.randn(2), torch.randn(2))
        self.assert_tracing_state_clean()

    def test_run_time_or_tensor_value_is_a_graph_break_naming_its_key_path(self):
        # a number known only at run time (.item()) or a tensor key cannot be read as a constant: a graph break
        # naming where it sits (an error under fullgraph=True)
        def by_item(x):
            with fx_traceback.annotate({"m": {"n": x.sum().item()}}):
                return x.cos()

        def by_key(x):
            with fx_traceback.annotate({"m": [0, {x: 1}]}):
                return x.cos()

        for fn, message in ((by_item, r"value at \['m'\]\['n'\] is a symbolic float, known only at run time"),
                            (by_key, r"a key of the annotation value at \['m'\]\[1\] is Tensor")):
            with self.subTest(fn.__name__), torch._dynamo.config.patch(capture_scalar_outputs=True):
                torch._dynamo.reset()
                with self.assertRaisesRegex(torch._dynamo.exc.Unsupported, message):
                    torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)(torch.randn(4))
        self.assert_tracing_state_clean()

    @torch._dynamo.config.patch(capture_scalar_outputs=True)
    def test_run_time_value_without_fullgraph_is_a_graph_break_at_the_annotate_call(self):
        from torch._dynamo.utils import counters

        def f(x):
            with fx_traceback.annotate({"n": x.sum().item()}):
                return x.cos()

        counters.clear()
        x = torch.randn(4)
        self.assertEqual(torch.compile(f, backend="eager")(x), x.cos())
        self.assertEqual(len([b for b in counters["graph_break"] if "['n']" in b]), 1)
        self.assert_tracing_state_clean()

    def test_annotation_that_is_not_a_dict_is_a_clear_error(self):
        # eager annotate(3) raises TypeError; compiled: a Dynamo error under fullgraph=True (not an internal
        # error), and without it annotate runs eagerly and raises the same TypeError
        def f(x):
            with fx_traceback.annotate(3):
                return x.sin()

        with self.assertRaises(TypeError):
            f(torch.randn(4))
        with self.assertRaises(torch._dynamo.exc.Unsupported):
            torch.compile(f, backend="eager", fullgraph=True)(torch.randn(4))
        torch._dynamo.reset()
        with self.assertRaises(TypeError):
            torch.compile(f, backend="eager")(torch.randn(4))
        self.assert_tracing_state_clean()

    def test_set_annotation_is_what_dict_makes_of_it(self):
        # a set is not a dict (2.5.1-2.11.0 Dynamo traces a set as a kind of dict variable): the annotation is
        # what eager's dict() makes of it, and a set nested in the annotation stays that set
        def eager_custom(annotation):
            with fx_traceback.annotate(annotation):
                return fx_traceback.current_meta["custom"]

        def by_pair(x):
            with fx_traceback.annotate({"ab"}):
                y = x.sin()
            with fx_traceback.annotate({"s": {"stage", 0}}):
                return y.cos()

        cap = self.compile_and_run(by_pair, torch.randn(4), fullgraph=True, backward=False)
        customs = [n.meta.get("custom") for n in cap.dynamo_graphs[0].graph.nodes if n.op in NODE_OPS]
        self.assertEqual(customs, [{"a": "b"}, {"s": {"stage", 0}}])
        self.assertEqual(customs, [eager_custom({"ab"}), eager_custom({"s": {"stage", 0}})])
        self.assertIs(type(customs[1]["s"]), set)

        def by_set(x):
            with fx_traceback.annotate({"stage", 0}):
                return x.sin()

        # eager: dict() of it raises (a TypeError; a ValueError where the set's order puts "stage" first)
        with self.assertRaises((TypeError, ValueError)) as eager:
            by_set(torch.randn(4))
        torch._dynamo.reset()
        with self.assertRaisesRegex(torch._dynamo.exc.Unsupported,
                                    "torch.fx.traceback.annotate value is not a constant"):
            torch.compile(by_set, backend="eager", fullgraph=True)(torch.randn(4))
        # without fullgraph the frame falls back and annotate raises eager's error
        torch._dynamo.reset()
        with self.assertRaises(type(eager.exception)) as compiled:
            torch.compile(by_set, backend="eager")(torch.randn(4))
        self.assertEqual(str(compiled.exception), str(eager.exception))
        self.assert_tracing_state_clean()

    def test_value_of_no_python_type_is_a_graph_break_naming_its_key_path(self):
        # a value Dynamo may know no Python type for (on the older releases: a bound method, a context
        # manager) is still the graph break naming where it sits, not an internal error
        def by_method(x):
            with fx_traceback.annotate({"v": x.sin}):
                return x.cos()

        def by_context_manager(x):
            with fx_traceback.annotate({"m": [torch.no_grad()]}):
                return x.cos()

        for fn, message in ((by_method, r"value at \['v'\] is \w+"),
                            (by_context_manager, r"value at \['m'\]\[0\] is \w+")):
            with self.subTest(fn.__name__):
                torch._dynamo.reset()
                with self.assertRaisesRegex(torch._dynamo.exc.Unsupported, message):
                    torch.compile(fn, backend="eager", fullgraph=True)(torch.randn(4))
        self.assert_tracing_state_clean()

    def sizes_and_customs(self, f, args_of, values, **compile_kwargs):
        """Compile f (fullgraph), call it with args_of(v) for each value, and return the number of graphs and the
        custom of each node that has one, graph by graph."""
        cap = Capture()
        compiled = torch.compile(f, backend=cap, fullgraph=True, **compile_kwargs)
        for value in values:
            args = args_of(value)
            self.assertEqual(compiled(*args), f(*args))
        return [[n.meta["custom"] for n in gm.graph.nodes if n.op in NODE_OPS and "custom" in n.meta]
                for gm in cap.dynamo_graphs]

    def test_symbolic_size_is_read_as_its_value_one_graph_per_size(self):
        # a size is specialized, as guard_if_dyn does: the annotation holds it, each new size compiles again
        def f(x):
            with fx_traceback.annotate({"n": x.shape[0]}):
                return x.cos()

        self.assertEqual(self.sizes_and_customs(f, lambda n: (torch.randn(n),), (4, 5, 6, 5), dynamic=True),
                         [[{"n": 4}], [{"n": 5}], [{"n": 6}]])
        self.assert_tracing_state_clean()

    def test_symbolic_slice_bound_is_read_as_its_value(self):
        # annotate({"v": slice(1, x.shape[0])}) compiles on the release, one graph per size: still
        def f(x):
            with fx_traceback.annotate({"v": slice(1, x.shape[0])}):
                return x.cos()

        self.assertEqual(self.sizes_and_customs(f, lambda n: (torch.randn(n),), (4, 5), dynamic=True),
                         [[{"v": slice(1, 4)}], [{"v": slice(1, 5)}]])
        self.assert_tracing_state_clean()

    def test_int_argument_and_argument_list_item_are_read_as_their_value(self):
        # automatic dynamic makes an int argument and an int in an argument's list symbolic once they change:
        # both are read as their value, one graph per value
        def f_int(x, k):
            with fx_traceback.annotate({"n": k}):
                return x.cos()

        def f_list(x, sizes):
            with fx_traceback.annotate({"n": sizes[0]}):
                return x.cos()

        for f, arg_of in ((f_int, lambda k: k), (f_list, lambda k: [k])):
            with self.subTest(f.__name__):
                torch._dynamo.reset()
                self.assertEqual(self.sizes_and_customs(f, lambda k: (torch.randn(4), arg_of(k)), (1, 2, 3, 2)),
                                 [[{"n": 1}], [{"n": 2}], [{"n": 3}]])
        self.assert_tracing_state_clean()

    def test_key_added_to_a_decorator_dict_or_a_nested_dict_recompiles(self):
        # the keys of every dict read are guarded, as its values are
        dec = {"stage": 0, "m": {"a": 1}}

        @fx_traceback.annotate_fn(dec)
        def decorated_cos(x):
            return x.cos()

        def args_of(step):
            if step == 1:
                dec["new"] = 1
            elif step == 2:
                dec["m"]["b"] = 2
            return (torch.randn(4),)

        self.assertEqual(self.sizes_and_customs(lambda x: decorated_cos(x) + 1, args_of, (0, 1, 2, 2)),
                         [[{"stage": 0, "m": {"a": 1}}], [{"stage": 0, "m": {"a": 1}, "new": 1}],
                          [{"stage": 0, "m": {"a": 1, "b": 2}, "new": 1}]])
        self.assert_tracing_state_clean()

    def test_shape_is_read_as_a_torch_size_one_graph_per_shape(self):
        # x.shape once automatic dynamic made it symbolic: each size read as its value, a torch.Size as in eager
        def f(x):
            with fx_traceback.annotate({"shape": x.shape}):
                return x.cos()

        customs = self.sizes_and_customs(f, lambda n: (torch.randn(n, 2),), (4, 5, 6, 5))
        self.assertEqual(customs, [[{"shape": torch.Size([n, 2])}] for n in (4, 5, 6)])
        self.assertEqual({type(c[0]["shape"]) for c in customs}, {torch.Size})
        self.assert_tracing_state_clean()

    def test_size_marked_dynamic_fails_as_any_specialization_of_it(self):
        # reading a size specializes it: a size marked dynamic gets the constraint-violation error any
        # specialization of it gets (not a graph break)
        from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

        def f(x):
            with fx_traceback.annotate({"n": x.shape[0]}):
                return x.cos()

        x = torch.randn(4)
        torch._dynamo.mark_dynamic(x, 0)
        with self.assertRaises(ConstraintViolationError):
            torch.compile(f, backend="eager", fullgraph=True)(x)
        self.assert_tracing_state_clean()

    def test_dict_or_list_that_holds_itself_is_a_graph_break_naming_it(self):
        cyclic_dict = {"stage": 0}
        cyclic_dict["m"] = [0, cyclic_dict]
        cyclic_list = [0]
        cyclic_list.append(cyclic_list)

        def by_dict(x):
            with fx_traceback.annotate(cyclic_dict):
                return x.cos()

        def by_list(x):
            with fx_traceback.annotate({"l": cyclic_list}):
                return x.cos()

        # (some releases' builder, 2.5.1's for one, refuses a list that holds itself first, with its own graph break)
        for fn, message in ((by_dict, r"value at \['m'\]\[1\] is dict, which holds itself"),
                            (by_list, r"value at \['l'\]\[1\] is list, which holds itself"
                                      r"|list elements are pointing to the list itself")):
            with self.subTest(fn.__name__):
                torch._dynamo.reset()
                with self.assertRaisesRegex(torch._dynamo.exc.Unsupported, message):
                    torch.compile(fn, backend="eager", fullgraph=True)(torch.randn(4))
        self.assert_tracing_state_clean()

    def test_argument_list_of_pairs_is_read_value_by_value(self):
        # a frame input's list of pairs whose int changes: read as a dict's values are, one graph per value
        def f(x, pairs):
            with fx_traceback.annotate(pairs):
                return x.cos()

        self.assertEqual(self.sizes_and_customs(f, lambda k: (torch.randn(4), [("n", k)]), (1, 2, 3, 2)),
                         [[{"n": 1}], [{"n": 2}], [{"n": 3}]])
        self.assert_tracing_state_clean()

    def test_an_int_argument_captured_by_a_nested_function_is_read_as_its_value(self):
        def f(x, k):
            with fx_traceback.annotate({"n": k}):
                y = x.sin()
            return y + (lambda: k)()

        self.assertEqual(self.sizes_and_customs(f, lambda k: (torch.randn(4), k), (1, 2, 3)),
                         [[{"n": 1}], [{"n": 2}], [{"n": 3}]])
        self.assert_tracing_state_clean()

    def annotated_customs_across_a_graph_break(self, f, args_of, values, **compile_kwargs):
        """Compile f (a graph break in it), call it with args_of(v) for each value, and return the custom of the
        annotated nodes of each graph that has one."""
        cap = Capture()
        compiled = torch.compile(f, backend=cap, **compile_kwargs)
        for value in values:
            args = args_of(value)
            self.assertEqual(compiled(*args), f(*args))
        customs = [[n.meta["custom"] for n in gm.graph.nodes if n.op in NODE_OPS and "custom" in n.meta]
                   for gm in cap.dynamo_graphs]
        return [c for c in customs if c]

    def test_an_int_argument_captured_by_a_nested_function_after_a_graph_break(self):
        def f(x, k):
            def read_k():
                return k

            y = x.sin()
            torch._dynamo.graph_break()
            with fx_traceback.annotate({"n": k}):
                z = y.cos()
            return z + read_k()

        self.assertEqual(self.annotated_customs_across_a_graph_break(f, lambda k: (torch.randn(4), k), (1, 2, 3)),
                         [[{"n": 1}], [{"n": 2}], [{"n": 3}]])
        self.assert_tracing_state_clean()

    def test_a_local_copy_read_after_a_graph_break_keeps_its_value(self):
        # s = d["stage"], a graph break, annotate({"stage": s}): each value is in the annotation (rg7)
        d = {"stage": 0}

        def f(x):
            s = d["stage"]
            y = x.sin()
            torch._dynamo.graph_break()
            with fx_traceback.annotate({"stage": s}):
                return y.cos()

        def args_of(value):
            d["stage"] = value
            return (torch.randn(4),)

        self.assertEqual(self.annotated_customs_across_a_graph_break(f, args_of, (0, 1, 2)),
                         [[{"stage": 0}], [{"stage": 1}], [{"stage": 2}]])
        self.assert_tracing_state_clean()

    def test_changed_int_in_the_closure_cell_after_a_graph_break_stays_a_constant(self):
        stage = 0

        def f(x):
            y = x.sin()
            torch._dynamo.graph_break()
            with fx_traceback.annotate({"stage": stage}):
                return y.cos()

        def args_of(value):
            nonlocal stage
            stage = value
            return (torch.randn(4),)

        self.assertEqual(self.annotated_customs_across_a_graph_break(f, args_of, (0, 1, 2)),
                         [[{"stage": 0}], [{"stage": 1}], [{"stage": 2}]])
        self.assert_tracing_state_clean()

    def test_a_size_stored_in_the_closure_cell_is_read_as_its_value(self):
        n = 0

        def f(x):
            nonlocal n
            n = x.shape[0]
            torch._dynamo.graph_break()
            with fx_traceback.annotate({"n": n}):
                return x.cos()

        self.assertEqual(self.annotated_customs_across_a_graph_break(f, lambda n: (torch.randn(n),), (4, 5, 6),
                                                                     dynamic=True),
                         [[{"n": 4}], [{"n": 5}], [{"n": 6}]])
        self.assert_tracing_state_clean()

    def test_graph_break_inside_a_block_entered_by_a_call_of_enter(self):
        # no `with` statement holds the block: nothing would enter it again after the break, so
        # the frame runs eagerly, as without resuming (resuming gave an AttributeError)
        seen = []

        @torch._dynamo.disable
        def look(tag):
            seen.append((tag, fx_traceback.current_meta.get("custom")))

        def f(x):
            block = fx_traceback.annotate({"m": 1})
            block.__enter__()
            a = x.sin()
            torch._dynamo.graph_break()
            look("inside")
            b = a.cos()
            block.__exit__(None, None, None)
            look("after")
            return b

        x = torch.randn(4)
        self.assertEqual(torch.compile(f, backend="eager")(x), x.sin().cos())
        self.assertEqual(seen, [("inside", {"m": 1}), ("after", None)])
        self.assert_tracing_state_clean()

    def test_graph_break_inside_annotate_with_an_int_argument_that_changes(self):
        # The annotation is an input of the resume function: an int in it that changed becomes dynamic on
        # recompile, and is read as its value there (rv9a: the graph-break patch alone crashed in the resume
        # function's prologue on 2.15.0, where the pristine release ran the frame eagerly)
        def f(x, i):
            with fx_traceback.annotate({"layer": i}):
                a = x.sin()
                torch._dynamo.graph_break()
                return a.cos()

        self.assertEqual(self.annotated_customs_across_a_graph_break(f, lambda i: (torch.randn(4), i), (0, 1)),
                         [[{"layer": 0}], [{"layer": 0}], [{"layer": 1}], [{"layer": 1}]])
        self.assert_tracing_state_clean()

    def test_graph_break_inside_annotate_in_each_layer_of_a_sequential(self):
        # The per-layer pattern: one forward, reached with self.i = 0, 1, 2
        class Layer(torch.nn.Module):
            def __init__(self, i):
                super().__init__()
                self.i = i
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                with fx_traceback.annotate({"layer": self.i}):
                    x = self.lin(x)
                    torch._dynamo.graph_break()
                    return x.relu()

        model = torch.nn.Sequential(*(Layer(i) for i in range(3)))
        customs = self.annotated_customs_across_a_graph_break(model, lambda _: (torch.randn(2, 4),), (None,))
        # each layer: its linear, then its relu in the resume function
        self.assertEqual([{str(c) for c in cs} for cs in customs],
                         [{str({"layer": i})} for i in (0, 0, 1, 1, 2, 2)])
        self.assert_tracing_state_clean()

    def cos_customs_per_value(self, f, set_value, values=(0, 1, 2)):
        """Compile f (fullgraph), call it once after each set_value(v), and return the custom of the cos of each
        graph Dynamo made."""
        cap = Capture()
        compiled = torch.compile(f, backend=cap, fullgraph=True)
        for value in values:
            set_value(value)
            compiled(torch.randn(4))
        return [g.graph.find_nodes(op="call_method", target="cos")[0].meta["custom"] for g in cap.dynamo_graphs]

    def test_changed_int_in_a_closure_dict_stays_a_constant(self):
        # the compiled function's own closure is not one of its inputs: its changed int is read as its value
        d = {"stage": 0}

        def f(x):
            with fx_traceback.annotate({"stage": d["stage"]}):
                return x.cos()

        self.assertEqual(self.cos_customs_per_value(f, lambda v: d.update(stage=v)),
                         [{"stage": 0}, {"stage": 1}, {"stage": 2}])

    def test_changed_int_in_the_closure_cell_stays_a_constant(self):
        # the compiled function's own closure cell, as an item of its closure dict: not one of its inputs
        stage = 0

        def f(x):
            with fx_traceback.annotate({"stage": stage}):
                return x.cos()

        def set_stage(value):
            nonlocal stage
            stage = value

        self.assertEqual(self.cos_customs_per_value(f, set_stage), [{"stage": 0}, {"stage": 1}, {"stage": 2}])

    def test_changed_int_in_an_inlined_functions_closure_stays_a_constant(self):
        # the make_stage(i) factory: the root of the int's source (the compiled function's closure) decides,
        # not its last link (the inlined function's cell)
        def make_stage(i):
            def stage(x):
                with fx_traceback.annotate({"stage": i}):
                    return x.cos()
            return stage

        stage = make_stage(0)

        def set_stage(value):
            nonlocal stage
            stage = make_stage(value)

        self.assertEqual(self.cos_customs_per_value(lambda x: stage(x) + 1, set_stage),
                         [{"stage": 0}, {"stage": 1}, {"stage": 2}])

    def test_changed_attribute_of_a_closure_object_stays_a_constant(self):
        cfg = types.SimpleNamespace(stage=0)

        def f(x):
            with fx_traceback.annotate({"stage": cfg.stage}):
                return x.cos()

        self.assertEqual(self.cos_customs_per_value(f, lambda v: setattr(cfg, "stage", v)),
                         [{"stage": 0}, {"stage": 1}, {"stage": 2}])

    def test_expression_over_a_closure_dict_int_stays_a_constant(self):
        # d["stage"] + 1 is made only of an int read as its value: it is read as its value too
        d = {"stage": 0}

        def f(x):
            with fx_traceback.annotate({"stage": d["stage"] + 1}):
                return x.cos()

        self.assertEqual(self.cos_customs_per_value(f, lambda v: d.update(stage=v)),
                         [{"stage": 1}, {"stage": 2}, {"stage": 3}])


class AnnotateCurrentMetaReadTests(TestCase):
    """Code inside a compiled annotate() block that reads fx.traceback.current_meta: Dynamo
    enters the block while tracing, so the read is a graph break and runs in eager, where it
    sees the block's annotation (local-dynamo-current-meta-read); before, building the guard
    on current_meta["custom"] failed with an internal KeyError once the block was left."""

    def setUp(self):
        super().setUp()
        torch._dynamo.reset()
        self.graphs = []

    def compile(self, fn, **kwargs):
        def backend(gm, example_inputs):
            self.graphs.append(gm)
            return gm.forward

        return torch.compile(fn, backend=backend, **kwargs)

    def annotations(self):
        return [[n.meta.get("custom") for n in g.graph.nodes
                 if n.op in ("call_function", "call_method")] for g in self.graphs]

    def test_current_meta_read_inside_annotate_runs_in_eager(self):
        # where the graph breaks differs between releases (at the read, or the whole frame runs
        # eagerly); the read sees the block's annotation and nothing is left behind
        seen = []

        def read(x):
            with fx_traceback.annotate({"p": 1}):
                seen.append(fx_traceback.current_meta.get("custom"))
                return x.sin() + 1

        def read_twice(x):
            with fx_traceback.annotate({"p": 1}):
                y = x.sin()
                seen.append(fx_traceback.current_meta.get("custom"))
                seen.append(len(fx_traceback.current_meta["custom"]))
                return y + 1

        x = torch.randn(4)
        for f, expected in ((read, [{"p": 1}]), (read_twice, [{"p": 1}, 1])):
            with self.subTest(f.__name__):
                torch._dynamo.reset()
                seen.clear()
                self.assertEqual(self.compile(f)(x), x.sin() + 1)
                self.assertEqual(seen, expected)
                self.assertNotIn("custom", fx_traceback.current_meta)

    def test_get_current_meta_result_used_inside_annotate_sees_the_block(self):
        # where the graph breaks at the get_current_meta() call, the dict it returned is used
        # after the resume function was traced: still the live current_meta
        seen = []

        def f(x):
            with fx_traceback.annotate({"p": 1}):
                meta = fx_traceback.get_current_meta()
                seen.append(meta.get("custom"))
                return x.sin() + 1

        x = torch.randn(4)
        self.assertEqual(self.compile(f)(x), x.sin() + 1)
        self.assertEqual(seen, [{"p": 1}])
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_compiled_annotate_block_leaves_current_meta_as_eager_does(self):
        # the dict that was current_meta before the compiled block is current_meta again after
        # it, without the block's annotation: code that got it earlier keeps seeing annotate()
        held = []

        @torch._dynamo.disable
        def hold():
            held.append(fx_traceback.current_meta)

        def f(x):
            hold()
            with fx_traceback.annotate({"p": 1}):
                y = x.sin()
            return y + 1

        x = torch.randn(4)
        self.assertEqual(self.compile(f)(x), x.sin() + 1)
        self.assertIs(held[0], fx_traceback.current_meta)
        self.assertNotIn("custom", held[0])
        with fx_traceback.annotate({"q": 2}):
            self.assertEqual(held[0].get("custom"), {"q": 2})

    def test_module_attribute_read_inside_annotate_is_not_folded_into_the_graph(self):
        # fx_traceback.current_meta read as a module attribute: the graph break must not turn
        # into the dict as it was while tracing, baked in with no guard (a later call outside
        # the caller's block would still see the caller's annotation)
        seen = []

        def f(x):
            with fx_traceback.annotate({"p": 1}):
                seen.append(fx_traceback.current_meta.get("custom"))
                return x.sin() + 1

        x = torch.randn(4)
        compiled = self.compile(f)
        with fx_traceback.annotate({"c": 1}):
            compiled(x)
        compiled(x)
        self.assertEqual(seen, [{"c": 1, "p": 1}, {"p": 1}])
        torch._dynamo.reset()
        with self.assertRaisesRegex(torch._dynamo.exc.Unsupported,
                                    "torch.fx.traceback.current_meta read inside annotate"):
            self.compile(f, fullgraph=True)(x)
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_get_current_meta_inside_annotate_with_fullgraph_names_the_read(self):
        def f(x):
            with fx_traceback.annotate({"p": 1}):
                return x.sin() + len(fx_traceback.get_current_meta()["custom"])

        with self.assertRaisesRegex(torch._dynamo.exc.Unsupported,
                                    "torch.fx.traceback.current_meta read inside annotate"):
            self.compile(f, fullgraph=True)(torch.randn(4))
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_current_meta_read_after_a_graph_break_inside_annotate(self):
        # the graph before the break carries the block; the resume function re-enters it,
        # and the read there runs in eager and sees the block's annotation
        seen = []

        def f(x):
            with fx_traceback.annotate({"p": 1}):
                a = x.sin()
                torch._dynamo.graph_break()
                seen.append(fx_traceback.current_meta.get("custom"))
                return a.cos()

        x = torch.randn(4)
        self.assertEqual(self.compile(f)(x), x.sin().cos())
        self.assertEqual(self.annotations()[0], [{"p": 1}])
        self.assertEqual(seen, [{"p": 1}])
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_current_meta_read_outside_annotate_is_traced(self):
        # as on the release: outside any block the read is traced and guarded, also after a
        # block of the same frame and under a caller's eager block (a second graph)
        seen = []

        def f(x):
            seen.append(fx_traceback.current_meta.get("custom"))
            with fx_traceback.annotate({"p": 1}):
                y = x.sin()
            seen.append(fx_traceback.current_meta.get("custom"))
            return y + 1

        x = torch.randn(4)
        compiled = self.compile(f)
        self.assertEqual(compiled(x), x.sin() + 1)
        with fx_traceback.annotate({"caller": 0}):
            self.assertEqual(compiled(x), x.sin() + 1)
        self.assertEqual(seen, [None, None, {"caller": 0}, {"caller": 0}])
        self.assertEqual(len(self.graphs), 2)


@requires_oracle
class AnnotateDynamoOracleTests(TestCase):
    """The same programs under upstream torch: where upstream has the behaviour, the
    per-graph node annotations are identical; a graph break is where we go beyond it."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ours = run_json(sys.executable, ORACLE_PROGRAM)["captures"]
        cls.upstream = oracle_json(ORACLE_PROGRAM)["captures"]

    def test_same_annotations_as_upstream(self):
        for name in ("nested", "decorators", "decorated_method", "around_checkpoint"):
            with self.subTest(name):
                self.assertTrue(self.upstream[name]["graphs"], "upstream captured nothing")
                self.assertEqual(self.ours[name], self.upstream[name])

    def test_graph_break_beyond_upstream(self):
        # upstream abandons the frame to eager; we compile both sides, annotated
        self.assertEqual(self.upstream["graph_break"]["graphs"], [])
        self.assertEqual(self.ours["graph_break"], {
            "graphs": [['{"region": 0}'], ['null', '{"region": 0}']], "same_as_eager": True})


if __name__ == "__main__":
    run_tests()
