"""torch.fx.traceback.annotate / annotate_fn and the tracing state they
write (patches 163673-annotate, local-stacktrace-hooks-reset,
local-annotation-test-helpers, local-annotate-exit-any-order and, from 2.10,
local-annotate-fresh-dict and local-view-replay-owns-custom)."""
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/graph_capture.py when run as a script

from graph_capture import meta_table


def customs(gm):
    return {n.name: n.meta.get("custom") for n in gm.graph.nodes if n.op == "call_function"}


def trace(fn, *args):
    with fx_traceback.preserve_node_meta():
        return make_fx(fn)(*args)


class TestAnnotateApi(TestCase):
    def test_nesting_merges_inner_keys_win_and_restores(self):
        with fx_traceback.annotate({"a": 1, "b": 1}):
            self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 1})
            with fx_traceback.annotate({"b": 2, "c": 3}):
                self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 2, "c": 3})
            self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 1})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_state_restored_when_body_raises(self):
        with fx_traceback.annotate({"outer": 0}):
            with self.assertRaisesRegex(ValueError, "inside"):
                with fx_traceback.annotate({"inner": 1}):
                    raise ValueError("inside")
            self.assertEqual(fx_traceback.current_meta["custom"], {"outer": 0})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_decorator_forms_and_eager_is_unchanged(self):
        @fx_traceback.annotate({"via": "ctx"})
        def f(x):
            return x.sin() * 2

        @fx_traceback.annotate_fn({"via": "fn"})
        def g(x):
            return x.sin() * 2

        self.assertEqual(g.__name__, "g")
        x = torch.randn(4)
        self.assertEqual(f(x), x.sin() * 2)
        self.assertEqual(g(x), x.sin() * 2)
        self.assertEqual(fx_traceback.current_meta, {})
        self.assertEqual(customs(trace(g, x)), {"sin": {"via": "fn"}, "mul": {"via": "fn"}})
        self.assertEqual(customs(trace(f, x)), {"sin": {"via": "ctx"}, "mul": {"via": "ctx"}})


def held_open(annotation):
    """A generator holding an annotate() block open while suspended."""
    with fx_traceback.annotate(annotation):
        yield


def layers():
    """A generator entering one block per layer, suspended inside each."""
    for i in range(2):
        with fx_traceback.annotate({"layer": i}):
            yield i


def current_custom():
    return fx_traceback.current_meta.get("custom")


class TestAnnotateExitAnyOrder(TestCase):
    # annotate() puts back on exit what was current at its entry (as upstream), except that a dict made by a block
    # already left is never made current again: a suspended generator's block left inside a later block no longer
    # comes back when the later block is left (the release: it does, and stays current after both; review rg13).
    def tearDown(self):
        super().tearDown()
        self.assertNotIn("custom", fx_traceback.current_meta)  # no test leaves an annotation behind

    def test_generator_block_left_inside_a_later_block(self):
        with fx_traceback.annotate({"caller": 1}):
            caller = current_custom()
            it = held_open({"g": 1})
            next(it)
            with fx_traceback.annotate({"m": 1}):
                self.assertEqual(current_custom(), {"caller": 1, "g": 1, "m": 1})
                for _ in it:
                    pass
                self.assertIs(current_custom(), caller)  # what the generator's block was entered over
            self.assertIs(current_custom(), caller)
        self.assertIsNone(current_custom())

    def test_later_block_left_after_the_generator(self):
        it = held_open({"g": 1})
        next(it)
        block = fx_traceback.annotate({"m": 1})
        block.__enter__()
        for _ in it:
            pass
        self.assertIsNone(current_custom())
        block.__exit__(None, None, None)
        self.assertIsNone(current_custom())

    def test_half_consumed_generator_leaves_nothing_after_the_block(self):
        with fx_traceback.annotate({"stage": 0}):
            it = layers()
            self.assertEqual(next(it), 0)
            self.assertEqual(current_custom(), {"stage": 0, "layer": 0})
        self.assertIsNone(current_custom())
        with fx_traceback.annotate({"x": 1}):
            self.assertEqual(current_custom(), {"x": 1})
        self.assertIsNone(current_custom())
        it.close()
        self.assertIsNone(current_custom())

    def test_compiled_annotate_after_a_half_consumed_generator(self):
        def f(x):
            with fx_traceback.annotate({"x": 1}):
                return torch.sin(x)

        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm

        with fx_traceback.annotate({"stage": 0}):
            it = layers()
            next(it)
        it.close()
        torch._dynamo.reset()
        torch.compile(f, backend=backend, fullgraph=True)(torch.randn(3))
        (gm,) = graphs
        self.assertEqual([n.meta.get("custom") for n in gm.graph.nodes if n.op == "call_function"], [{"x": 1}])

    def test_every_way_out_of_a_generator_block(self):
        # closed early, thrown into, returning: each leaves the generator's block inside a later one, which then
        # leaves nothing behind
        def close(it):
            it.close()

        def throw(it):
            with self.assertRaises(ValueError):
                it.throw(ValueError("stop"))

        def exhaust(it):
            self.assertEqual(list(it), [])

        for leave in (close, throw, exhaust):
            with self.subTest(leave=leave.__name__):
                it = held_open({"g": 1})
                next(it)
                with fx_traceback.annotate({"m": 1}):
                    leave(it)
                    self.assertIsNone(current_custom())
                self.assertIsNone(current_custom())

    def test_exception_leaving_blocks_out_of_order(self):
        it = held_open({"g": 1})
        next(it)
        with self.assertRaisesRegex(RuntimeError, "boom"):
            with fx_traceback.annotate({"m": 1}):
                it.close()
                raise RuntimeError("boom")
        self.assertIsNone(current_custom())

    def test_in_order_exits_after_an_out_of_order_one_restore_as_upstream(self):
        # blocks left in the order they were entered put back the very dict current at their entry, as upstream,
        # also once a generator's block has been left out of order
        it = held_open({"g": 1})
        next(it)
        with fx_traceback.annotate({"a": 1}):
            it.close()
            self.assertIsNone(current_custom())
            with fx_traceback.annotate({"b": 2}):
                b = current_custom()
                with self.assertRaisesRegex(RuntimeError, "boom"):
                    with fx_traceback.annotate({"c": 3}):
                        self.assertEqual(current_custom(), {"b": 2, "c": 3})
                        raise RuntimeError("boom")
                self.assertIs(current_custom(), b)
            self.assertIsNone(current_custom())
        self.assertIsNone(current_custom())

    def test_block_entered_under_set_current_meta_in_between(self):
        # set_current_meta() installs a node's meta and puts the caller's back behind annotate(): a later block entered
        # over the generator's dict still knows it as the generator's and does not bring it back (review xo9: after
        # the m block the generator's {"g": 1} was current again)
        gm = make_fx(torch.sin)(torch.randn(3))
        (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        with fx_traceback.preserve_node_meta():
            it = held_open({"g": 1})
            next(it)
            with fx_traceback.set_current_meta(node):
                with fx_traceback.annotate({"b": 1}):
                    pass
            with fx_traceback.annotate({"m": 1}):
                for _ in it:
                    pass
                self.assertIsNone(current_custom())
            self.assertIsNone(current_custom())

    def test_block_entered_inside_preserve_node_meta_left_after_it(self):
        # preserve_node_meta() puts the generator's dict back on exit while a block entered inside it is still open: a
        # later block entered over that dict does not bring it back once the generator's block is left (review xo9:
        # after c, {"a": 1})
        it = held_open({"a": 1})
        next(it)
        with fx_traceback.preserve_node_meta():
            inner = held_open({"p": 1})
            next(inner)
        with fx_traceback.annotate({"c": 1}):
            for _ in it:
                pass
            self.assertIsNone(current_custom())
        self.assertIsNone(current_custom())
        inner.close()
        self.assertIsNone(current_custom())

    def test_nodes_traced_after_a_block_is_left_out_of_order(self):
        def f(x):
            it = held_open({"g": 1})
            next(it)
            with fx_traceback.annotate({"m": 1}):
                x = x.sin()
                for _ in it:
                    pass
                x = x.cos()
            return x.tan()

        self.assertEqual(customs(trace(f, torch.randn(3))), {"sin": {"g": 1, "m": 1}, "cos": None, "tan": None})


class TestAnnotateMakeFx(TestCase):
    def test_make_fx_nodes_get_merged_custom(self):
        def f(x):
            with fx_traceback.annotate({"region": "a"}):
                y = x.sin()
                with fx_traceback.annotate({"stage": 1, "region": "b"}):
                    y = y.cos()
            return y.exp()

        self.assertExpectedInline(meta_table(trace(f, torch.randn(3)), columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.sin.default|{'region': 'a'}
aten.cos.default|{'region': 'b', 'stage': 1}
aten.exp.default|""")


class TestCopySemantics(TestCase):
    """The copy rule written in annotate's docstring: each node owns a
    top-level copy of its annotations, values are shared (as upstream), and
    tracing never mutates the caller's dict or a container inside it."""

    def test_each_node_owns_its_top_level_custom(self):
        user = {"region": "a", "id": 0}

        def f(x):
            with fx_traceback.annotate(user):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        sin, cos = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertEqual(sin.meta["custom"], user)
        self.assertIsNot(sin.meta["custom"], cos.meta["custom"])
        self.assertIsNot(sin.meta["custom"], user)
        sin.meta["custom"]["region"] = "edited"
        sin.meta["custom"]["added"] = 1
        self.assertEqual(cos.meta["custom"], {"region": "a", "id": 0})
        self.assertEqual(user, {"region": "a", "id": 0})

    def test_values_are_shared_not_copied(self):
        big = list(range(1000))
        user = {"tags": big}

        def f(x):
            with fx_traceback.annotate(user):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        for n in gm.graph.nodes:
            if n.op == "call_function":
                self.assertIs(n.meta["custom"]["tags"], big, n.name)

    def test_values_deepcopy_refuses_work(self):
        lock = threading.Lock()
        gen = (i for i in range(3))
        weight = torch.ones(2)
        user = {"lock": lock, "gen": gen, "weight": weight}

        def f(x):
            with fx_traceback.annotate(user):
                return (x.sin() * 2).sum()

        gm = trace(f, torch.randn(3))
        (mul,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.mul.Tensor]
        self.assertIs(mul.meta["custom"]["lock"], lock)
        self.assertIs(mul.meta["custom"]["gen"], gen)
        self.assertIs(mul.meta["custom"]["weight"], weight)

        from graph_capture import RecordGraphs

        recorder = RecordGraphs()
        x = torch.randn(3, requires_grad=True)

        def g(x):
            with fx_traceback.annotate({"lock": lock, "gen": gen, "weight": weight}):
                return (x.sin() * 2).sum()

        from functorch.compile import aot_function

        aot_function(g, fw_compiler=recorder.fw_compiler, bw_compiler=recorder.bw_compiler)(x).backward()
        bw_custom = [n.meta.get("custom") for n in recorder.bw_graphs[0].graph.nodes if n.op == "call_function"]
        self.assertIn({"lock": lock, "gen": gen, "weight": weight}, bw_custom)

    def test_iterable_of_pairs_like_dict(self):
        with fx_traceback.annotate([("a", 1), ("b", 2)]):
            self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 2})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_tracing_never_mutates_the_user_dicts(self):
        outer = {"stage": 0, "cfg": {"k": [1]}}
        inner = {"stage": 1, "extra": [2]}
        snapshot = repr((outer, inner))

        def f(x):
            with fx_traceback.annotate(outer):
                y = x.sin()
                with fx_traceback.annotate(inner):
                    y = y.cos()
                    state_custom = fx_traceback.current_meta["custom"]
                    state_custom_is_user = state_custom is outer or state_custom is inner
                return y, state_custom_is_user

        with fx_traceback.preserve_node_meta():
            gm = make_fx(lambda x: f(x)[0])(torch.randn(3))
            _, state_custom_is_user = f(torch.randn(3))
        self.assertFalse(state_custom_is_user)
        self.assertEqual(repr((outer, inner)), snapshot)
        self.assertEqual(customs(gm), {"sin": {"stage": 0, "cfg": {"k": [1]}},
                                       "cos": {"stage": 1, "cfg": {"k": [1]}, "extra": [2]}})

    def test_node_custom_is_not_the_tracing_state(self):
        seen = {}

        def f(x):
            with fx_traceback.annotate({"tags": ["x"]}):
                y = x.sin()
                seen["state"] = fx_traceback.current_meta["custom"]
                return y

        gm = trace(f, torch.randn(3))
        (sin,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIsNot(sin.meta["custom"], seen["state"])

    def test_retrace_copies_custom_from_source_node(self):
        def f(x):
            with fx_traceback.annotate({"tag": "x"}):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        with fx_traceback.preserve_node_meta():
            gm2 = make_fx(torch.fx.Interpreter(gm).run)(torch.randn(3))
        old = [n for n in gm.graph.nodes if n.op == "call_function"]
        new = [n for n in gm2.graph.nodes if n.op == "call_function"]
        self.assertEqual([n.meta["custom"] for n in new], [{"tag": "x"}] * 2)
        new[0].meta["custom"]["tag"] = "edited"
        self.assertEqual(old[0].meta["custom"], {"tag": "x"})
        self.assertEqual(new[1].meta["custom"], {"tag": "x"})

    def test_node_copy_gives_the_copy_its_own_custom(self):
        # local-node-copy-owns-custom: the partitioner builds the forward and
        # backward graphs with Graph.node_copy
        shared = ["value"]
        gm = trace(lambda x: x.sin(), torch.randn(3))
        (sin,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        sin.meta["custom"] = {"tag": "x", "shared": shared}
        graph, env = torch.fx.Graph(), {}
        for n in gm.graph.nodes:
            env[n] = graph.node_copy(n, lambda a: env[a])
        copy = env[sin]
        self.assertEqual(copy.meta["custom"], {"tag": "x", "shared": shared})
        self.assertIsNot(copy.meta["custom"], sin.meta["custom"])
        self.assertIs(copy.meta["custom"]["shared"], shared)  # values shared
        copy.meta["custom"]["tag"] = "edited"
        self.assertEqual(sin.meta["custom"]["tag"], "x")

    def test_nested_annotate_leaves_the_enclosing_annotation_unchanged(self):
        # local-annotate-fresh-dict (2.10 on): an inner block builds a new dict
        with fx_traceback.annotate({"a": 1}):
            outer = fx_traceback.get_current_meta()["custom"]
            with fx_traceback.annotate({"b": 2}):
                self.assertEqual(fx_traceback.get_current_meta()["custom"], {"a": 1, "b": 2})
            self.assertEqual(outer, {"a": 1})
            self.assertIs(fx_traceback.get_current_meta()["custom"], outer)
        self.assertNotIn("custom", fx_traceback.get_current_meta())

    def test_annotate_while_retracing_a_node_leaves_the_node_unchanged(self):
        # local-annotate-fresh-dict (2.10 on): set_current_meta installs a shallow copy of the
        # node's meta, as fx.Interpreter does for every node it re-traces
        def f(x):
            with fx_traceback.annotate({"stage": 0}):
                return x.sin()

        gm = trace(f, torch.randn(3))
        (sin,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        with fx_traceback.preserve_node_meta(), fx_traceback.set_current_meta(sin):
            with fx_traceback.annotate({"extra": 1}):
                self.assertEqual(fx_traceback.get_current_meta()["custom"], {"stage": 0, "extra": 1})
        self.assertEqual(sin.meta["custom"], {"stage": 0})

    def test_regenerated_view_owns_its_custom(self):
        # local-view-replay-owns-custom (2.10 on): functionalization regenerates the stale view
        # v; the regenerated slice gets its own top-level copy of the replayed node's custom
        from torch._functorch.aot_autograd import aot_export_module

        class StaleView(torch.nn.Module):
            def forward(self, x):
                y = x.clone()
                with fx_traceback.annotate({"block": "views"}):
                    v = y[1:]
                    before = v.sum()
                y.mul_(2)
                return (v.cos(), before)

        with fx_traceback.preserve_node_meta():
            gm, _ = aot_export_module(StaleView(), (torch.randn(3, 2),), trace_joint=False)
        first, regenerated = [n for n in gm.graph.nodes if n.target == torch.ops.aten.slice.Tensor]
        self.assertEqual(first.meta["custom"], {"block": "views"})
        self.assertEqual(regenerated.meta["custom"], {"block": "views"})
        regenerated.meta["custom"]["stage"] = 1
        self.assertEqual(first.meta["custom"], {"block": "views"})

class TestTracingStateIsProcessWide(TestCase):
    """fx.traceback's tracing state is one for the process, as in the release
    and upstream: a thread the tracing thread hands work to sees it."""

    def test_make_fx_in_a_thread_pool_worker_gets_the_callers_node_meta(self):
        def f(x):
            return (x.sin() * 2).sum()

        def node_meta(gm):
            # seq_nr values come from autograd's counter, which is per thread (in the release too)
            return [(n.op, n.name, {k: "<seq_nr>" if k == "seq_nr" else str(v) for k, v in n.meta.items()
                                    if k not in ("val", "tensor_meta")})
                    for n in gm.graph.nodes]

        def capture(run):
            with fx_traceback.preserve_node_meta(), fx_traceback.annotate({"region": "pool"}):
                return run(lambda: make_fx(f)(torch.randn(3)))

        here = capture(lambda trace: trace())
        with ThreadPoolExecutor(1) as pool:
            there = capture(lambda trace: pool.submit(trace).result())
        self.assertEqual(node_meta(there), node_meta(here))
        for n in there.graph.nodes:
            self.assertIn("seq_nr", n.meta, n.name)
            if n.op == "call_function":
                self.assertEqual(str(n.meta["original_aten"]), str(n.target), n.name)
                self.assertEqual(n.meta["custom"], {"region": "pool"}, n.name)

    def test_backward_run_by_another_thread_traces_with_the_tracing_state(self):
        """Autograd runs the backward of device tensors in its own worker
        threads; the stack-trace preservation hooks set the one tracing state
        from whichever thread runs them."""
        from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks

        x = torch.randn(3, requires_grad=True)
        y = x.sin()
        seen = {}

        def snapshot(grad_output):  # runs after the preservation prehook
            seen["custom"] = fx_traceback.get_current_meta().get("custom")
            seen["seq_nr"] = fx_traceback.get_current_meta().get("grad_fn_seq_nr")
            seen["preserving"] = fx_traceback.has_preserved_node_meta()

        with fx_traceback.preserve_node_meta(), fx_traceback.annotate({"owner": "main"}):
            setup_stacktrace_preservation_hooks([y.grad_fn])
            y.grad_fn.register_prehook(snapshot)
            worker = threading.Thread(target=lambda: torch.autograd.grad(y.sum(), x))
            worker.start()
            worker.join(30)
            self.assertEqual(seen, {"custom": {"owner": "main"}, "seq_nr": [y.grad_fn._sequence_nr()],
                                    "preserving": True})
            # the backward ended: its grad_fn seq_nr is gone again
            self.assertNotIn("grad_fn_seq_nr", fx_traceback.current_meta)
            self.assertEqual(fx_traceback.current_meta["custom"], {"owner": "main"})


class TestAnnotationTestHelpers(TestCase):
    """Upstream's test helpers, with upstream's output format (local-annotation-test-helpers)."""

    def test_get_custom_metadata_lists_annotated_nodes(self):
        def f(x):
            with fx_traceback.annotate({"pp_stage": 0}):
                y = x + 1
            return y * 2

        gm = trace(f, torch.randn(3))
        self.assertExpectedInline(fx_traceback._get_custom_metadata(gm), """\
('call_function', 'add', {'pp_stage': 0})""")

    def test_get_ordered_seq_nr_groups_pairs_forward_and_backward(self):
        from graph_capture import RecordGraphs
        from functorch.compile import aot_function

        recorder = RecordGraphs()
        aot_function(lambda x: x.sin().cos().sum(), fw_compiler=recorder.fw_compiler,
                     bw_compiler=recorder.bw_compiler)(torch.randn(3, requires_grad=True)).backward()
        groups = fx_traceback._get_ordered_seq_nr_groups(recorder.fw_graphs + recorder.bw_graphs)
        self.assertExpectedInline(str(groups), """[['cos_1', 'mul_1', 'sin'], ['cos', 'mul', 'neg', 'sin_1'], ['expand', 'sum_1']]""")


class TestNoStateLeaks(TestCase):
    def test_symint_and_output_nodes_carry_original_aten_as_the_release_writes_it(self):
        # set_original_aten_op writes original_aten = None when its op ends (the
        # release and upstream through 2.15 do), so the SymInt nodes traced after
        # an op (sym_size.int, a mul of sizes) and the output node carry it.
        def f(x):
            y = x.sin()
            return y, x.shape[0] * x.shape[1]

        with fx_traceback.preserve_node_meta():
            gm = make_fx(f, tracing_mode="symbolic")(torch.randn(3, 4))
        table = "\n".join(f"{n.op}|{n.name}|{n.meta.get('original_aten', '<no key>')}" for n in gm.graph.nodes)
        self.assertExpectedInline(table, """\
placeholder|x_1|<no key>
call_function|sin|aten.sin.default
call_function|sym_size_int|None
call_function|sym_size_int_1|None
call_function|mul|None
output|output|None""")

    def test_same_capture_twice_gives_identical_tables(self):
        def f(x):
            with fx_traceback.annotate({"r": 1}):
                y = x.sin()
            return y.cos()

        tables = []
        for _ in range(2):
            gm = trace(f, torch.randn(3))
            tables.append(meta_table(gm, columns=("OrigAten", "custom", "autograd_backward")))
        self.assertEqual(tables[0], tables[1])


class TestAnnotationEnteredInTrace(TestCase):
    """fx.traceback._annotation_entered_in_trace tells an annotation the traced code entered from a caller's
    eager block around the trace (local-annotation-entered-in-trace)."""

    def trace_looking(self, f, *args):
        seen = []

        def look():
            seen.append(fx_traceback._annotation_entered_in_trace())

        make_fx(lambda x: f(x, look))(*args)
        return seen

    def test_caller_annotation_is_not_entered_in_the_trace(self):
        def f(x, look):
            look()
            with fx_traceback.annotate({"inner": 1}):
                look()
            look()
            return x + 1

        with fx_traceback.annotate({"caller": 0}):
            seen = self.trace_looking(f, torch.randn(2))
            # the caller's own block is current again, outside any trace
            self.assertIsNone(fx_traceback._annotation_entered_in_trace())
        self.assertEqual(seen, [None, {"caller": 0, "inner": 1}, None])

    def test_annotation_entered_in_the_trace_without_a_caller_block(self):
        def f(x, look):
            with fx_traceback.annotate({"inner": 1}):
                look()
            look()
            return x + 1

        self.assertEqual(self.trace_looking(f, torch.randn(2)), [{"inner": 1}, None])

    def test_nested_trace_sees_the_outer_trace_annotation(self):
        def f(x, look):
            with fx_traceback.annotate({"outer trace": 1}):
                make_fx(lambda y: (look(), y * 2)[1])(x)
            return x + 1

        with fx_traceback.annotate({"caller": 0}):
            seen = self.trace_looking(f, torch.randn(2))
        self.assertEqual(seen, [{"caller": 0, "outer trace": 1}])

    def test_node_annotation_equal_to_the_caller_one_is_not_entered_in_trace(self):
        with fx_traceback.annotate({"caller": 0}):
            gm = trace(lambda x: x + 1, torch.randn(2))
        (add,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertEqual(add.meta.get("custom"), {"caller": 0})
        looked = []

        def traced(x):
            looked.append(fx_traceback._annotation_entered_in_trace(add))
            return x

        with fx_traceback.annotate({"caller": 0}):
            make_fx(traced)(torch.randn(2))
        make_fx(traced)(torch.randn(2))
        self.assertEqual(looked, [None, {"caller": 0}])

    def test_tensor_valued_annotation(self):
        # Told apart by identity: no value's __eq__ runs (a tensor's would raise: "Boolean value of Tensor with
        # more than one value is ambiguous").
        def f(x, look):
            look()
            with fx_traceback.annotate({"weight": torch.zeros(2)}):
                look()
            return x + 1

        weight = torch.ones(2)
        with fx_traceback.annotate({"weight": weight}):
            before, inside = self.trace_looking(f, torch.randn(2))
        self.assertIsNone(before)
        self.assertEqual(list(inside), ["weight"])
        self.assertIsNot(inside["weight"], weight)

    def test_trace_in_another_thread_keeps_its_own_caller_annotation(self):
        # While another thread traces (with nothing current), this thread traces inside a caller block of its
        # own: that block is this trace's caller annotation, not one entered in a trace.
        other_tracing, this_done = threading.Event(), threading.Event()

        def other(x):
            other_tracing.set()
            this_done.wait(timeout=60)
            return x * 2

        def f(x, look):
            look()
            with fx_traceback.annotate({"inner": 1}):
                look()
            return x + 1

        thread = threading.Thread(target=lambda: make_fx(other)(torch.randn(2)))
        thread.start()
        try:
            self.assertTrue(other_tracing.wait(timeout=60))
            with fx_traceback.annotate({"caller": 0}):
                seen = self.trace_looking(f, torch.randn(2))
        finally:
            this_done.set()
            thread.join(timeout=60)
        self.assertEqual(seen, [None, {"caller": 0, "inner": 1}])


if __name__ == "__main__":
    run_tests()
