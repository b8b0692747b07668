# Owner(s): ["oncall: export"]
"""torch.fx.traceback.annotate under torch.export (patches 164916-dynamo-annotate,
local-export-nonstrict-custom and, from 2.10, local-export-no-internal-keys): strict and
non-strict exports carry node.meta["custom"] without a user preserve_node_meta(), hold no
internal keys in it, and keep it through run_decompositions() and torch.export.save/load.
save/load write and read custom as the release does (json.dumps / json.loads, upstream's
format): any value json.dumps takes saves, and comes back as JSON gives it back.
"""
import collections
import contextlib
import enum
import inspect
import io
import json
import sys
import unittest.mock
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from torch._export.serde.serialize import SerializeError
from torch.testing._internal.common_utils import run_tests, TestCase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import oracle_json, requires_oracle, run_json  # noqa: E402



class Annotated(torch.nn.Module):
    def __init__(self, annotation=None):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.annotation = annotation or {"stage": 0, "cfg": {"bucket": [1, 2]}}

    def forward(self, x):
        with fx_traceback.annotate(self.annotation):
            y = self.lin(x)
        return torch.nn.functional.relu(y)


def customs(ep):
    """{call_function node target name: custom} of an ExportedProgram."""
    return {str(n.target): n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"}


def round_trip(ep):
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


EXPECTED_CUSTOM = {"stage": 0, "cfg": {"bucket": [1, 2]}}


class AnnotatedCond(torch.nn.Module):
    """A torch.cond inside the module's own annotate() block, one branch entering a block of its own."""

    def forward(self, p, x):
        def sin(x):
            with fx_traceback.annotate({"b": 2}):
                return x.sin()

        def cos(x):
            return x.cos()

        with fx_traceback.annotate({"a": 1}):
            y = torch.cond(p, sin, cos, (x,))
        return y + 1


def cond_customs(ep):
    """{call_function node name: custom} of an ExportedProgram, branch graphs included."""
    return {n.name: n.meta.get("custom") for m in ep.graph_module.modules()
            if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes if n.op == "call_function"}


# upstream 2.13's strict export of AnnotatedCond, bare and inside an eager annotate({"caller": 0})
# (ExportAnnotateOracleTests.test_cond_branches_match_upstream checks it against the oracle)
EXPECTED_COND = {"cond": {"a": 1}, "getitem": {"a": 1}, "add": None, "sin": {"a": 1, "b": 2},
                 "cos": {"a": 1}}
EXPECTED_COND_IN_CALLER = {k: v and {"caller": 0, **v} for k, v in EXPECTED_COND.items()}
# non-strict export: a branch's ops record the blocks open around the cond, not the branch's own block (Dynamo
# records that in the branch graph's custom, which make_fx replays only under preserve_node_meta())
EXPECTED_COND_NON_STRICT = {**EXPECTED_COND, "sin": {"a": 1}}
EXPECTED_COND_NON_STRICT_IN_CALLER = {k: v and {"caller": 0, **v} for k, v in EXPECTED_COND_NON_STRICT.items()}


def annotated_sin(x):
    with fx_traceback.annotate({"b": 2}):
        return x.sin()


def true_branch_customs(ep):
    """[(custom of the cond node, [custom of each op of its true branch])] per torch.cond, in graph order."""
    gm = ep.graph_module
    return [(cond.meta.get("custom"), [n.meta.get("custom") for n in getattr(gm, cond.args[1].target).graph.nodes
                                       if n.op == "call_function"])
            for cond in gm.graph.nodes if cond.op == "call_function" and cond.target is torch.ops.higher_order.cond]


def sin_in_a_g_block(x):
    """A generator that yields x.sin() inside annotate({"g": 1}) and leaves the block only when exhausted: the
    out-of-order block exits of the generator tests."""
    with fx_traceback.annotate({"g": 1}):
        yield x.sin()


def shift_calling_scale(wrap):
    """shift(x) = scale(x.cos()) + 1 with scale(x) = x * 2, both wrapped by ``wrap``: the nested disabled calls of
    the disable-wrapper tests."""
    @wrap
    def scale(x):
        return x * 2

    @wrap
    def shift(x):
        return scale(x.cos()) + 1

    return shift


class ExportAnnotateTests(TestCase):
    def export(self, strict, module=None):
        torch._dynamo.reset()
        ep = torch.export.export(module or Annotated(), (torch.randn(2, 4),), strict=strict)
        self.assertNotIn("custom", fx_traceback.current_meta)
        self.assertFalse(fx_traceback.has_preserved_node_meta())
        return ep

    def test_strict_and_non_strict_carry_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                self.assertEqual(customs(self.export(strict)),
                                 {"aten.linear.default": EXPECTED_CUSTOM, "aten.relu.default": None})

    def test_no_internal_keys_in_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                ep = self.export(strict)
                annotated = [n.meta["custom"] for n in ep.graph.nodes if "custom" in n.meta]
                self.assertTrue(annotated)
                for custom in annotated:
                    self.assertEqual(sorted(custom), ["cfg", "stage"])

    def test_no_internal_keys_in_custom_inside_preserve_node_meta(self):
        # From 2.10 the disable wrapper annotates a function it wraps while exporting, make_fx's
        # own dispatch_trace (the whole non-strict trace) included, unless patched.
        torch._dynamo.reset()
        with fx_traceback.preserve_node_meta():
            ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=False)
        self.assertEqual({n.name: n.meta["custom"] for n in ep.graph.nodes if n.meta.get("custom")},
                         {"linear": EXPECTED_CUSTOM})

    def test_caller_annotation_stays_off_user_inputs_output_and_unannotated_ops(self):
        # an eager annotate() around export: only the block the module enters records, merged with
        # the caller's annotation (upstream 2.13's strict export does the same; the oracle test below).
        # The parameters' placeholders are left out: strict export gives each the annotation of the
        # block that reads it, non-strict export lifts them before the forward runs (none).
        for strict in (True, False):
            with self.subTest(strict=strict):
                torch._dynamo.reset()
                with fx_traceback.annotate({"caller": 1}):
                    ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=strict)
                got = {n.name: n.meta.get("custom") for n in ep.graph.nodes if not n.name.startswith("p_")}
                self.assertEqual(got, {"x": None, "linear": {"caller": 1, **EXPECTED_CUSTOM}, "relu": None,
                                       "output": None})

    def test_tensor_valued_annotation_inside_a_caller_block(self):
        # The caller's annotation is told apart by identity: no value's __eq__ runs (a tensor's raises).
        class TensorAnnotated(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                with fx_traceback.annotate({"scale": torch.zeros(2)}):
                    y = self.lin(x)
                return y.relu()

        torch._dynamo.reset()
        with fx_traceback.annotate({"scale": torch.ones(2)}):
            ep = torch.export.export(TensorAnnotated(), (torch.randn(2, 4),), strict=False)
        got = {n.name: n.meta.get("custom") for n in ep.graph.nodes}
        self.assertEqual(list(got["linear"]), ["scale"])
        self.assertEqual([got["x"], got["relu"], got["output"]], [None, None, None])

    def test_cond_branch_records_the_block_around_the_cond(self):
        # the branches are traced by tracers of their own, made inside the module's annotate({"a": 1}): that block
        # is the module's, not the caller's, and the branch's ops record it; the block the branch enters itself
        # ({"b": 2}) is recorded by strict export only. Known gap, documented rather than fixed (listed in
        # local-export-nonstrict-custom): non-strict export cannot tell the branch's own block from the blocks around
        # the cond
        args = (torch.tensor(True), torch.randn(3))
        for strict, bare, in_caller in ((True, EXPECTED_COND, EXPECTED_COND_IN_CALLER),
                                        (False, EXPECTED_COND_NON_STRICT, EXPECTED_COND_NON_STRICT_IN_CALLER)):
            with self.subTest(strict=strict):
                torch._dynamo.reset()
                self.assertEqual(cond_customs(torch.export.export(AnnotatedCond(), args, strict=strict)), bare)
                torch._dynamo.reset()
                with fx_traceback.annotate({"caller": 0}):
                    ep = torch.export.export(AnnotatedCond(), args, strict=strict)
                self.assertEqual(cond_customs(ep), in_caller)

    def test_disabled_user_function_records_nothing_when_nothing_is_annotated(self):
        # From 2.10 torch._dynamo.disable annotates the function it wraps with internal keys while
        # exporting; they are Dynamo's bookkeeping, recorded only under a user preserve_node_meta().
        @torch._dynamo.disable
        def scale(x):
            return x * 2

        class M(torch.nn.Module):
            def forward(self, x):
                return scale(x).relu()

        ep = self.export(False, M())
        self.assertEqual({n.name: n.meta["custom"] for n in ep.graph.nodes if "custom" in n.meta}, {})

    def test_no_internal_keys_inside_preserve_node_meta_once_dynamo_has_run(self):
        # Dynamo wraps fx's Tracer.trace in disable the first time it runs (from 2.10 that wrapper, too,
        # annotates the whole non-strict trace while exporting, unless patched)
        torch.compile(lambda x: x + 1, backend="eager")(torch.randn(2))
        self.test_no_internal_keys_in_custom_inside_preserve_node_meta()

    def test_disabled_functions_other_than_dispatch_trace_keep_their_keys(self):
        # Only make_fx's own dispatch_trace goes unannotated; torch.utils.checkpoint.checkpoint, disabled
        # too, keeps the keys the wrapper gives its ops inside a preserve_node_meta() (from 2.10, upstream PR
        # 166341: no such keys before)
        class Checkpointed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                return torch.utils.checkpoint.checkpoint(self.lin, x, use_reentrant=False).relu()

        torch._dynamo.reset()
        with fx_traceback.preserve_node_meta():
            ep = torch.export.export(Checkpointed(), (torch.randn(2, 4),), strict=False)
        keys = {"_torchdynamo_disable": True, "_torchdynamo_disable_recursive": True,
                "_torchdynamo_disable_method": "checkpoint"}
        annotated = {n.name: n.meta["custom"] for n in ep.graph.nodes if n.meta.get("custom")}
        if torch.__version__ < (2, 10):
            self.assertEqual(annotated, {})
            return
        # The checkpointed ops hold the keys (which ops those are differs by release: 2.10 also traces
        # the checkpoint's empty() buffers); the op outside the checkpoint and the graph's inputs do not.
        self.assertIn("linear", annotated)
        self.assertEqual({name: keys for name in annotated}, annotated)
        self.assertNotIn("relu", annotated)

    def test_run_decompositions_keeps_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                decomposed = customs(self.export(strict).run_decompositions())
                self.assertNotIn("aten.linear.default", decomposed)
                self.assertEqual(decomposed, {"aten.permute.default": EXPECTED_CUSTOM,
                                              "aten.addmm.default": EXPECTED_CUSTOM,
                                              "aten.relu.default": None})

    def test_save_load_round_trip(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                ep = self.export(strict)
                loaded = round_trip(ep)
                self.assertEqual(customs(loaded), customs(ep))
                self.assertEqual(customs(round_trip(ep.run_decompositions()))["aten.addmm.default"],
                                 EXPECTED_CUSTOM)
                x = torch.randn(2, 4)
                self.assertEqual(loaded.module()(x), ep.module()(x))

    def test_unserialisable_annotation_fails_at_save_as_in_the_release(self):
        # non-strict runs annotate eagerly, so any Python value can reach custom
        ep = self.export(False, Annotated({"stage": 0, "devices": {"cpu", "meta"}}))
        self.assertEqual(customs(ep)["aten.linear.default"]["devices"], {"cpu", "meta"})
        with self.assertRaisesRegex(SerializeError, r"Failed to serialize custom metadata for node linear"):
            torch.export.save(ep, io.BytesIO())

    def test_one_cond_call_site_under_two_annotations(self):
        # Each call of the same cond, under its own annotation: its true branch records that call's annotation, as
        # strict export records it, which also records the branch's own block (reviews re6, rg6: found by cond
        # node, not by generated branch names)
        class TwoStages(torch.nn.Module):
            def forward(self, p, x):
                for i in range(2):
                    with fx_traceback.annotate({"stage": i}):
                        x = torch.cond(p, annotated_sin, torch.cos, (x,))
                return x + 1

        args = (torch.tensor(True), torch.randn(3))
        for strict, b in ((True, {"b": 2}), (False, {})):
            with self.subTest(strict=strict):
                torch._dynamo.reset()
                self.assertEqual(true_branch_customs(torch.export.export(TwoStages(), args, strict=strict)),
                                 [({"stage": 0}, [{"stage": 0, **b}]), ({"stage": 1}, [{"stage": 1, **b}])])

    def test_cond_branch_setting_the_calls_key_records_the_call(self):
        # One cond call site under {"region": "attn"}, then {"region": "mlp"}, its branch setting "region" to
        # "attn" itself: non-strict export records each call's annotation on the branch's ops, never the branch's
        # own block (review rg13: which of its keys the branch set was guessed by identity of values), strict
        # export records the branch's own block
        def attn(x):
            with fx_traceback.annotate({"region": "attn"}):
                return x.sin()

        class TwoRegions(torch.nn.Module):
            def forward(self, p, x):
                for region in ("attn", "mlp"):
                    with fx_traceback.annotate({"region": region}):
                        x = torch.cond(p, attn, torch.cos, (x,))
                return x + 1

        args = (torch.tensor(True), torch.randn(3))
        attn_, mlp = {"region": "attn"}, {"region": "mlp"}
        for strict, second in ((True, attn_), (False, mlp)):
            with self.subTest(strict=strict):
                torch._dynamo.reset()
                self.assertEqual(true_branch_customs(torch.export.export(TwoRegions(), args, strict=strict)),
                                 [(attn_, [attn_]), (mlp, [second])])

    def test_body_graph_carrying_custom_records_the_calls_annotation(self):
        # A body graph whose nodes carry custom (traced under {"stage": 0} with preserve_node_meta()) at two call
        # sites of the cond op, as a cached compile of torch.cond calls it: its ops record the annotation of the
        # call running it, not the graph's (review rg6)
        from torch.fx.experimental.proxy_tensor import make_fx

        with fx_traceback.preserve_node_meta(), fx_traceback.annotate({"stage": 0}):
            body = make_fx(annotated_sin)(torch.randn(3))
        other = make_fx(torch.cos)(torch.randn(3))

        class TwoSites(torch.nn.Module):
            def forward(self, p, x):
                ys = []
                for i in range(2):
                    with fx_traceback.annotate({"stage": i}):
                        ys.append(torch.ops.higher_order.cond(p, body, other, (x,)))
                return ys[0] + ys[1]

        ep = torch.export.export(TwoSites(), (torch.tensor(True), torch.randn(3)), strict=False)
        self.assertEqual(true_branch_customs(ep), [({"stage": 0}, [{"stage": 0}]), ({"stage": 1}, [{"stage": 1}])])

    def test_module_block_with_the_callers_own_objects(self):
        # The module enters the very annotation of the caller's block around export (the same small
        # int): that is a block of the traced code, recorded as strict export records it (review re6)
        def ops(strict):
            torch._dynamo.reset()
            with fx_traceback.annotate({"stage": 0}):
                ep = torch.export.export(Annotated({"stage": 0}), (torch.randn(2, 4),), strict=strict)
            return {n.name: n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"}

        non_strict = ops(strict=False)
        self.assertEqual(non_strict, {"linear": {"stage": 0}, "relu": None})
        self.assertEqual(ops(strict=True), non_strict)

    def disabled_ops(self, make_module, caller=None):
        """{op: custom} of a non-strict export of make_module(torch._dynamo.disable), inside annotate(caller) when
        given, checked against strict export of make_module(plain): Dynamo refuses to call a disabled function
        ("Skip calling `torch.compiler.disable()`d function"), so strict export runs the functions undecorated."""
        def ops(strict):
            torch._dynamo.reset()
            wrap = (lambda fn: fn) if strict else torch._dynamo.disable
            with fx_traceback.annotate(caller) if caller else contextlib.nullcontext():
                ep = torch.export.export(make_module(wrap), (torch.randn(2, 4),), strict=strict)
            return {n.name: n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"}

        non_strict = ops(strict=False)
        self.assertEqual(ops(strict=True), non_strict)
        return non_strict

    def test_disabled_function_in_a_block_with_the_callers_own_objects(self):
        # The module's block sets the caller's own {"stage": 0} again (the same small int) and calls a disabled
        # function: its ops record the block, as without the caller's block and as strict export (review rg1;
        # from 2.10, where the disable wrapper annotates a disabled function while exporting, they recorded nothing)
        def make_module(wrap):
            @wrap
            def scale(x):
                return x * 2

            class S(torch.nn.Module):
                def forward(self, x):
                    with fx_traceback.annotate({"stage": 0}):
                        return scale(x.sin())

            return S()

        expected = {"sin": {"stage": 0}, "mul": {"stage": 0}}
        self.assertEqual(self.disabled_ops(make_module), expected)
        self.assertEqual(self.disabled_ops(make_module, {"stage": 0}), expected)

    def test_nested_disabled_calls_in_a_block_with_the_callers_own_objects(self):
        # a disabled function calling another inside that block: the ops of both record the block
        def make_module(wrap):
            shift = shift_calling_scale(wrap)

            class S(torch.nn.Module):
                def forward(self, x):
                    with fx_traceback.annotate({"stage": 0}):
                        y = shift(x.sin())
                    return y.relu()

            return S()

        stage = {"stage": 0}
        self.assertEqual(self.disabled_ops(make_module, {"stage": 0}),
                         {"sin": stage, "cos": stage, "mul": stage, "add": stage, "relu": None})

    def test_disabled_calls_outside_the_modules_blocks(self):
        # Disabled functions called where no block of the module is open record nothing, nested or not, inside a
        # caller's block too; a block a disabled function enters itself records (from 2.10 it recorded nothing
        # inside a caller's block with the same objects)
        def make_module(wrap):
            shift = shift_calling_scale(wrap)

            @wrap
            def staged(x):
                with fx_traceback.annotate({"stage": 0}):
                    return x.tan()

            class S(torch.nn.Module):
                def forward(self, x):
                    return staged(shift(x.sin()))

            return S()

        expected = {"sin": None, "cos": None, "mul": None, "add": None, "tan": {"stage": 0}}
        self.assertEqual(self.disabled_ops(make_module), expected)
        self.assertEqual(self.disabled_ops(make_module, {"stage": 0}), expected)

    @unittest.skipIf(torch.__version__ < (2, 10), "the disable wrapper enters no annotate() block before 2.10")
    def test_disabled_call_resuming_a_generator_that_leaves_its_block_later(self):
        # A disabled function resumes a generator, which enters a block over the wrapper's dict and leaves it only
        # when the forward exhausts the generator, after the wrapper has returned: the wrapper's dict is current
        # again and still stands for the caller's, so add and exp record nothing, as strict export (review rg3;
        # they recorded {"caller": 1} while the wrapper's record ended with its block). Only inside a caller's
        # block: without one, the generator's exit leaves the wrapper's dict current after the export, in eager
        # code too (annotate() restores what it was entered over).
        def make_module(wrap):
            @wrap
            def start(it):
                return next(it)

            class S(torch.nn.Module):
                def forward(self, x):
                    it = sin_in_a_g_block(x)
                    y = start(it)
                    for _ in it:
                        pass
                    return (y + 1).exp()

            return S()

        self.assertEqual(self.disabled_ops(make_module, {"caller": 1}),
                         {"sin": {"caller": 1, "g": 1}, "add": None, "exp": None})

    @unittest.skipIf(torch.__version__ < (2, 10), "the disable wrapper enters no annotate() block before 2.10")
    def test_disabled_call_leaving_a_generators_block(self):
        # The forward enters a generator's block and a disabled function exhausts the generator: the wrapper's block
        # was entered over the generator's, and leaving it must not make the generator's dict current again (review
        # rg6: add and exp recorded {"caller": 1, "g": 1}, and {"g": 1} stayed current after the export)
        def make_module(wrap):
            @wrap
            def finish(it):
                for _ in it:
                    pass

            class S(torch.nn.Module):
                def forward(self, x):
                    it = sin_in_a_g_block(x)
                    y = next(it)
                    finish(it)
                    return (y + 1).exp()

            return S()

        for caller in ({"caller": 1}, None):
            with self.subTest(caller=caller):
                self.assertEqual(self.disabled_ops(make_module, caller),
                                 {"sin": {**(caller or {}), "g": 1}, "add": None, "exp": None})
                self.assertNotIn("custom", fx_traceback.current_meta)

    def test_generators_block_left_inside_a_later_block(self):
        # The generator's block, left inside the module's later block, puts back what it was entered over (the
        # caller's annotation, as upstream's annotate() does), which alone is never recorded; the later block's exit
        # does not bring the generator's dict back (review rg6: add and exp recorded {"caller": 1, "g": 1}). Strict
        # export is not compared: Dynamo pairs each annotate() with a preserve_node_meta(), whose exit restores the
        # state before it rather than what the block was entered over.
        class S(torch.nn.Module):
            def forward(self, x):
                it = sin_in_a_g_block(x)
                y = next(it)
                with fx_traceback.annotate({"m": 1}):
                    y = y.cos()
                    for _ in it:
                        pass
                    y = y.tan()
                return (y + 1).exp()

        torch._dynamo.reset()
        with fx_traceback.annotate({"caller": 1}):
            ep = torch.export.export(S(), (torch.randn(2, 4),), strict=False)
        self.assertEqual({n.name: n.meta.get("custom") for n in ep.graph.nodes},
                         {"x": None, "sin": {"caller": 1, "g": 1}, "cos": {"caller": 1, "g": 1, "m": 1}, "tan": None,
                          "add": None, "exp": None, "output": None})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_block_open_across_a_preserve_node_meta_of_the_forward(self):
        # preserve_node_meta() puts the module block's dict back on exit while a generator's block entered inside it
        # is still open: the ops that follow record the module's block, found by the dict current now (review xo9:
        # they recorded nothing)
        def held_open():
            with fx_traceback.annotate({"g": 1}):
                yield

        class P(torch.nn.Module):
            def forward(self, x):
                with fx_traceback.annotate({"stage": 0}):
                    with fx_traceback.preserve_node_meta():
                        it = held_open()
                        next(it)
                    x = x.sin()
                    it.close()
                return x.cos()

        torch._dynamo.reset()
        ep = torch.export.export(P(), (torch.randn(2, 4),), strict=False)
        self.assertEqual({n.name: n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"},
                         {"sin": {"stage": 0}, "cos": None})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_aot_export_module_records_no_custom(self):
        # Outside export, aot_export_module traces with the _ModuleStackTracer export uses, without
        # preserve_node_meta(): it records no annotation, as the release records none, in the module's
        # block or in a cond branch's (review rf4)
        from torch._functorch.aot_autograd import aot_export_module

        class C(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 3)

            def forward(self, p, x):
                def sin(x):
                    with fx_traceback.annotate({"b": 2}):
                        return x.sin()

                with fx_traceback.annotate({"a": 1}):
                    y = torch.cond(p, sin, torch.cos, (self.lin(x),))
                return (y + 1,)

        args = (torch.tensor(True), torch.randn(2, 3))
        for pre_dispatch in (False, True):
            with self.subTest(pre_dispatch=pre_dispatch):
                torch._dynamo.reset()
                gm, _ = aot_export_module(C(), args, trace_joint=False, pre_dispatch=pre_dispatch)
                ops = [n for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
                       for n in m.graph.nodes if n.op == "call_function"]
                self.assertNotEqual(ops, [])
                self.assertEqual([(n.name, n.meta["custom"]) for n in ops if "custom" in n.meta], [])

    @unittest.skipIf(torch.__version__ < (2, 10), "up to 2.9 non-strict export runs the forward once before its trace "
                     "(to collect metadata): a make_fx the forward runs there is the thread's outermost trace, taken for "
                     "export's own (listed in local-export-nonstrict-custom's 2.5.1 header)")
    @unittest.skipIf(
        (2, 11) <= torch.__version__ < (2, 12),
        "on 2.11 torch.cond's compile under a make_fx inside non-strict export fails Dynamo's own guard check "
        "('Guard failed on the same frame it was created': a torch function mode's torch_fn_counts), on the "
        "pristine 2.11.0 wheel too; 2.10, 2.12 and later pass",
    )
    def test_make_fx_inside_an_exported_forward_records_no_custom(self):
        # Non-strict export opts its own trace in (torch.export._trace enters fx.traceback._record_user_annotations);
        # a make_fx that the forward runs, with the _ModuleStackTracer export uses and a cond, records no annotation
        # without preserve_node_meta(), as outside export (review rg6: it did while torch.compiler.is_exporting())
        from torch.fx.experimental.proxy_tensor import make_fx

        def sin(x):
            with fx_traceback.annotate({"b": 2}):
                return x.sin()

        class Inner(torch.nn.Module):
            def forward(self, p, x):
                with fx_traceback.annotate({"inner": 1}):
                    return torch.cond(p, sin, torch.cos, (x.cos(),))

        def run(p, x):
            return run._orig_mod(p, x)

        run._orig_mod = Inner()  # make_fx's record_module_stack traces with _ModuleStackTracer for such a callable
        inner = []

        class M(torch.nn.Module):
            def forward(self, x):
                with fx_traceback.annotate({"outer": 1}):
                    inner.append(make_fx(run, record_module_stack=True)(torch.tensor(True), torch.randn(3)))
                    return x.cos()

        ep = self.export(False, M())
        self.assertEqual(customs(ep)["aten.cos.default"], {"outer": 1})
        (gm,) = inner
        nodes = [n for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
        self.assertIn("sin", [n.name for n in nodes])
        self.assertEqual({n.name: n.meta["custom"] for n in nodes if "custom" in n.meta}, {})

    def test_plain_make_fx_of_cond_is_unchanged(self):
        # Outside export, make_fx without preserve_node_meta() records no annotation, in a branch's
        # block or around the cond, and calls the branch graphs as the release does, with no fx
        # Interpreter replaying them node by node (review re6)
        from torch.fx.experimental.proxy_tensor import make_fx

        def sin(x):
            with fx_traceback.annotate({"b": 2}):
                return x.sin()

        def f(p, x):
            with fx_traceback.annotate({"a": 1}):
                return torch.cond(p, sin, torch.cos, (x,))

        replayed = []
        run_node = torch.fx.Interpreter.run_node

        def counting_run_node(self, n):
            replayed.append(n.name)
            return run_node(self, n)

        torch._dynamo.reset()
        with unittest.mock.patch.object(torch.fx.Interpreter, "run_node", counting_run_node):
            gm = make_fx(f)(torch.tensor(True), torch.randn(3))
        self.assertEqual(replayed, [])
        annotated = [n.meta.get("custom") for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
                     for n in m.graph.nodes if n.meta.get("custom")]
        self.assertEqual(annotated, [])


def typed(value):
    """``value`` with the type of every container, key and leaf spelled out, so
    that equal-but-retyped values (1 vs "1", a tuple vs a list) compare unequal."""
    if isinstance(value, dict):
        return ("dict", sorted((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


class Level(enum.IntEnum):
    LOW = 1


class Mode(str, enum.Enum):
    FAST = "fast"


Point = collections.namedtuple("Point", ["x", "y"])


class SaveLoadCustomTests(TestCase):
    """torch.export.save/load write and read custom as the release does, with json.dumps and
    json.loads (issue 20, items 2 and 3): what JSON keeps only approximately comes back as
    JSON gives it back, exact types are not kept (as upstream)."""

    def exported(self, custom):
        ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=False)
        linear = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default)
        linear.meta["custom"] = custom
        return ep

    def loaded_custom(self, custom):
        loaded = round_trip(self.exported(custom))
        return next(n for n in loaded.graph.nodes
                    if n.target == torch.ops.aten.linear.default).meta.get("custom", "<missing>")

    def test_json_values_come_back_equal(self):
        custom = {"s": "a", "i": 1, "f": 0.5, "b": True, "n": None,
                  "l": [1, "x", [2.0, False]], "d": {"k": {"kk": [None]}}}
        self.assertEqual(typed(self.loaded_custom(custom)), typed(custom))

    def test_values_json_takes_approximately_come_back_as_json_gives_them(self):
        custom = {"level": Level.LOW, "mode": Mode.FAST, "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
                  "point": Point(1, 2), "counts": collections.defaultdict(int, {"x": 3}), 3: "int key",
                  "mesh": (0, 1), "nested": [(2, {4: Level.LOW})]}
        loaded = self.loaded_custom(custom)
        self.assertEqual(typed(loaded), typed({"level": 1, "mode": "fast", "ordered": {"b": 1, "a": 2},
                                               "point": [1, 2], "counts": {"x": 3}, "3": "int key",
                                               "mesh": [0, 1], "nested": [[2, {"4": 1}]]}))
        self.assertEqual(list(loaded["ordered"]), ["b", "a"])

    def test_an_ordered_dict_as_the_whole_custom_saves(self):
        loaded = self.loaded_custom(collections.OrderedDict([("stage", 0), ("mode", Mode.FAST)]))
        self.assertEqual(typed(loaded), typed({"stage": 0, "mode": "fast"}))

    def test_saved_custom_is_json_dumps_of_it(self):
        # upstream's format, byte for byte: the release's serializer writes json.dumps(custom)
        from torch._export.serde.serialize import serialize

        custom = {"level": Level.LOW, "point": Point(1, 2), 3: (0, 1)}
        program = json.loads(serialize(self.exported(custom)).exported_program)
        saved = [node["metadata"]["custom"] for node in program["graph_module"]["graph"]["nodes"]
                 if "custom" in node["metadata"]]
        self.assertEqual(saved, [json.dumps(custom)])

    def test_empty_custom_is_not_saved(self):
        # as the release: an empty custom is falsy and not written, so load has none
        self.assertEqual(self.loaded_custom({}), "<missing>")

    def test_value_json_refuses_fails_at_save(self):
        for custom in ({"devices": {"cpu"}}, {(1, 2): "tuple key"}, {"tag": object()}):
            with self.subTest(custom=custom):
                with self.assertRaisesRegex(SerializeError, "Failed to serialize custom metadata for node linear"):
                    torch.export.save(self.exported(custom), io.BytesIO())

    def test_graph_level_custom_saves_as_json_gives_it(self):
        ep = self.exported({"ok": 1})
        ep.graph_module.meta["custom"] = collections.OrderedDict([(0, ("mesh", Level.LOW))])
        loaded = round_trip(ep)
        self.assertEqual(typed(loaded.graph_module.meta["custom"]), typed({"0": ["mesh", 1]}))
        ep.graph_module.meta["custom"] = {"mesh": {0, 1}}
        with self.assertRaisesRegex(SerializeError, "Failed to serialize custom metadata for graph"):
            torch.export.save(ep, io.BytesIO())


ORACLE_SNIPPET = """
import json, torch, torch.fx.traceback as fx_traceback
class Annotated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        with fx_traceback.annotate({"stage": 0, "cfg": {"bucket": [1, 2]}}):
            y = self.lin(x)
        return torch.nn.functional.relu(y)
ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=True)
with fx_traceback.annotate({"caller": 1}):
    in_caller = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=True)
out = {"in_caller": {n.name: n.meta.get("custom") for n in in_caller.graph.nodes},
       "export": {str(n.target): n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"},
       "decomposed": {str(n.target): n.meta.get("custom") for n in ep.run_decompositions().graph.nodes
                      if n.op == "call_function"}}
print(json.dumps(out, sort_keys=True))
"""


# The oracle runs the same module and reader as the tests above, given as their source text
ORACLE_COND_SNIPPET = (
    "import json, torch, torch.fx.traceback as fx_traceback\n"
    + inspect.getsource(AnnotatedCond) + inspect.getsource(cond_customs) + """
args = (torch.tensor(True), torch.randn(3))
bare = cond_customs(torch.export.export(AnnotatedCond(), args, strict=True))
with fx_traceback.annotate({"caller": 0}):
    in_caller = cond_customs(torch.export.export(AnnotatedCond(), args, strict=True))
print(json.dumps({"bare": bare, "in_caller": in_caller}, sort_keys=True))
"""
)


@requires_oracle
class ExportAnnotateOracleTests(TestCase):
    def test_strict_export_matches_upstream(self):
        upstream = oracle_json("-c", ORACLE_SNIPPET)
        self.assertEqual(upstream["export"]["aten.linear.default"], EXPECTED_CUSTOM)
        self.assertEqual(run_json(sys.executable, "-c", ORACLE_SNIPPET), upstream)

    def test_cond_branches_match_upstream(self):
        # the strict expectation of test_cond_branch_records_the_block_around_the_cond is upstream's
        self.assertEqual(oracle_json("-c", ORACLE_COND_SNIPPET),
                         {"bare": EXPECTED_COND, "in_caller": EXPECTED_COND_IN_CALLER})


if __name__ == "__main__":
    run_tests()
