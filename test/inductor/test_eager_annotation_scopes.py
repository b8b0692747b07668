"""Profiler scopes for the ops that run eagerly (local-eager-annotation-scopes,
beyond upstream): with torch._inductor.config.kernel_annotations on, the forward
and backward graphs of aot_eager, and the ops of a regional_inductor graph
outside its compiled regions, run each run of consecutive ops of one annotation
inside ``torch.profiler.record_function(NAME, "eager")``, NAME by the rule of
the kernels' scopes (test_kernel_annotations.py). With the flag off the graphs
are the ones AOTAutograd hands over and no scope is recorded. Upstream (through
2.15) records no region for these ops."""
import contextlib
import functools
import gc
import operator
import pickle
import unittest

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._dynamo.backends import debugging
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache
from torch.fx.passes.regional_inductor import regional_inductor
from torch.testing._internal.common_utils import TestCase, run_tests

ATTENTION, MLP, HEAD = {"region": "attention"}, {"region": "mlp"}, {"region": "head"}
COMPILED_MLP = {**MLP, "compile_with_inductor": 0}
COMPILED_SCALE = {"region": "scale", "compile_with_inductor": 0}
ENTER = torch.ops.profiler._record_function_enter_new.default
EXIT = torch.ops.profiler._record_function_exit._RecordFunction
PROFILER_OPS = {ENTER, EXIT}


def scope(custom, backward=False):
    suffix = " (backward)" if backward else ""
    items = ", ".join(
        f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
        for k, v in sorted(custom.items())
    )
    return "annotation " + items + suffix


# the scopes of a training step of Block(): its attention and MLP regions
FORWARD_AND_BACKWARD_SCOPES = {
    scope(custom, backward) for custom in (ATTENTION, MLP) for backward in (False, True)
}


class Block(torch.nn.Module):
    """An attention-like softmax, an MLP and a head, each in a region of its own
    (the head's only when ``head`` is given), and a scaling of one output in a
    region of its own when ``scale`` is given."""

    def __init__(self, mlp=MLP, head=None, scale=None, annotated=True):
        super().__init__()
        self.regions = (ATTENTION, mlp, head)
        self.scale = scale
        self.annotated = annotated
        self.q = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def region(self, custom):
        if self.annotated and custom is not None:
            return fx_traceback.annotate(custom)
        return contextlib.nullcontext()

    def forward(self, x):
        attention, mlp, head = self.regions
        with self.region(attention):
            probs = torch.softmax(self.q(x) @ x.transpose(-1, -2), dim=-1) @ x
        with self.region(mlp):
            y = self.down(torch.relu(self.up(probs)))
        with self.region(head):
            y = torch.tanh(y)
        if self.scale is not None:
            with self.region(self.scale):
                y = torch.sin(y) * 2
        return y


def make(**kwargs):
    """A Block with the same parameters every time."""
    torch.manual_seed(0)
    return Block(**kwargs)


def step(compiled, model):
    """Output and parameter gradients of one training step of ``compiled``
    (``model``, or what compiles it)."""
    torch.manual_seed(1)
    x = torch.randn(2, 8, 16)
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out.detach(), grads


def profile_step(model, backend, **config):
    """The output and gradients of a compiled training step of ``model`` (compiled
    under ``config``), and the profiler events of a second step."""
    torch._dynamo.reset()
    with fresh_inductor_cache(), inductor_config.patch(**config):
        compiled = torch.compile(model, backend=backend)
        result = step(compiled, model)
    with torch.profiler.profile() as prof:
        step(compiled, model)
    torch._dynamo.reset()
    return result, list(prof.events())


def scopes(events):
    return [e for e in events if e.name.startswith("annotation ")]


def ops_inside(events, scope_name):
    """The aten ops that ran inside a scope of that name (by time range)."""
    inside = set()
    for s in (e for e in events if e.name == scope_name):
        start, end = s.time_range.start, s.time_range.end
        inside |= {
            e.name
            for e in events
            if e.name.startswith("aten::")
            and start <= e.time_range.start
            and e.time_range.end <= end
        }
    return inside


def spy(compiler, seen):
    """``compiler``, recording the graph it is given before and after it runs."""

    def compile(gm, example_inputs):
        before = [n.format_node() for n in gm.graph.nodes]
        compiled = compiler(gm, example_inputs)
        after = [
            n.format_node() for n in gm.graph.nodes if n.target not in PROFILER_OPS
        ]
        scoped = [n for n in gm.graph.nodes if n.target in PROFILER_OPS]
        seen.append((before, after, scoped, gm))
        return compiled

    return compile


def compile_with(compiler, model, **config):
    """The graphs ``compiler`` is given as AOTAutograd's forward and backward
    compiler for a profiled training step of ``model`` (see :func:`spy`)."""
    seen = []
    nop = spy(compiler, seen)
    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop)
    profile_step(model, backend, **config)
    return seen


class TestAotEagerScopes(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        model = make()
        cls.eager = step(model, model)  # not compiled
        cls.on, cls.on_events = profile_step(
            make(), "aot_eager", kernel_annotations=True
        )
        cls.off, cls.off_events = profile_step(make(), "aot_eager")

    def test_forward_and_backward_regions_are_scoped(self):
        names = {e.name for e in scopes(self.on_events)}
        self.assertEqual(names, FORWARD_AND_BACKWARD_SCOPES)

    def test_each_scope_holds_its_regions_ops(self):
        self.assertIn("aten::_softmax", ops_inside(self.on_events, scope(ATTENTION)))
        self.assertIn(
            "aten::_softmax_backward_data",
            ops_inside(self.on_events, scope(ATTENTION, backward=True)),
        )
        self.assertIn("aten::relu", ops_inside(self.on_events, scope(MLP)))
        self.assertIn(
            "aten::threshold_backward",
            ops_inside(self.on_events, scope(MLP, backward=True)),
        )
        # the unannotated tanh runs in no scope
        for name in {e.name for e in scopes(self.on_events)}:
            self.assertNotIn("aten::tanh", ops_inside(self.on_events, name))

    def test_results_do_not_change(self):
        for result in (self.on, self.off):
            self.assertEqual(result, self.eager, atol=0, rtol=0)

    def test_every_aot_eager_backend_records_the_scopes(self):
        # aot_eager_decomp_partition, which runs Inductor's decompositions and
        # partitioner, compiles with get_nop_func, and
        # aot_eager_default_partitioner: the same scopes as aot_eager
        backends = ("aot_eager_decomp_partition", "aot_eager_default_partitioner")
        for backend in backends:
            _, events = profile_step(make(), backend, kernel_annotations=True)
            names = {e.name for e in scopes(events)}
            self.assertEqual(names, FORWARD_AND_BACKWARD_SCOPES, backend)

    def test_flag_off_records_no_scope(self):
        self.assertEqual(scopes(self.off_events), [])

    def test_graphs_change_only_with_the_flag(self):
        def compile_graphs(model, **config):
            # aot_eager's own compiler
            nop = debugging._boxed_nop_with_eager_scopes
            return compile_with(nop, model, **config)

        # Off: the compiler runs the graphs AOTAutograd hands it, untouched.
        for before, after, scoped, _ in compile_graphs(make()):
            self.assertEqual(after, before)
            self.assertEqual(scoped, [])
        # On without annotations: untouched too.
        for before, after, scoped, _ in compile_graphs(
            make(annotated=False), kernel_annotations=True
        ):
            self.assertEqual(after, before)
            self.assertEqual(scoped, [])
        # On: the same graphs plus the scopes, an enter and an exit per run.
        seen = compile_graphs(make(), kernel_annotations=True)
        self.assertEqual(len(seen), 2)
        for before, after, scoped, _ in seen:
            self.assertEqual(after, before)
            self.assertTrue(scoped)
            self.assertEqual(len(scoped) % 2, 0)
            # the scope nodes carry no annotation of their own
            self.assertFalse(any(n.meta.get("custom") for n in scoped))

    def test_shared_boxed_nop_adds_no_scope(self):
        # boxed_nop has other callers: the cudagraphs backend, whose CUDA-graph
        # replays run no CPU-side scope op, and (from 2.11)
        # regional_inductor_invoke_subgraph, whose graph calls the kernels
        # Inductor compiled, which have scopes of their own. Only the aot_eager
        # backends' compiler adds scopes.
        seen = compile_with(boxed_nop, make(), kernel_annotations=True)
        self.assertEqual(len(seen), 2)
        for before, after, scoped, _ in seen:
            self.assertEqual(after, before)
            self.assertEqual(scoped, [])


class TestRegionalInductorScopes(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.graphs = []
        compiler = spy(regional_inductor, cls.graphs)
        backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler)
        # the scale region has one output, so its call may take the output's
        # node meta: it must still run outside any eager scope
        regions = {"mlp": COMPILED_MLP, "head": HEAD, "scale": COMPILED_SCALE}
        model = make(**regions)
        cls.eager = step(model, model)  # not compiled
        cls.on, cls.events = profile_step(
            make(**regions), backend, kernel_annotations=True
        )

    def test_eager_ops_between_regions_are_scoped(self):
        for backward in (False, True):
            attention = ops_inside(self.events, scope(ATTENTION, backward))
            head = ops_inside(self.events, scope(HEAD, backward))
            self.assertIn(
                "aten::_softmax_backward_data" if backward else "aten::_softmax",
                attention,
            )
            self.assertIn("aten::tanh_backward" if backward else "aten::tanh", head)

    def test_compiled_region_keeps_its_kernel_scopes(self):
        names = {e.name for e in scopes(self.events)}
        for custom in (COMPILED_MLP, COMPILED_SCALE):
            self.assertIn(scope(custom), names)
            self.assertIn(scope(custom, backward=True), names)
        # relu and sin ran in compiled kernels, not as eager ops
        self.assertNotIn("aten::relu", {e.name for e in self.events})
        self.assertNotIn("aten::sin", {e.name for e in self.events})

    def test_eager_scopes_hold_only_eager_ops(self):
        # In the graphs regional_inductor returns, a scope holds aten ops (and
        # tuple items), never the call of a compiled region: that call's node
        # may carry the region's annotation (the single-output scale region on
        # 2.5.1-2.9.1), and its kernels have scopes of their own.
        self.assertEqual(len(self.graphs), 2)
        for _, _, scoped, gm in self.graphs:
            self.assertTrue(scoped)
            inside = False
            for node in gm.graph.nodes:
                if node.target is ENTER:
                    inside = True
                elif node.target is EXIT:
                    inside = False
                elif inside and node.op == "call_function":
                    eager_op = isinstance(node.target, torch._ops.OpOverload)
                    self.assertTrue(
                        eager_op or node.target is operator.getitem, node.format_node()
                    )

    def test_results_do_not_change(self):
        self.assertEqual(self.on, self.eager, atol=1e-5, rtol=1e-5)


@torch.fx.wrap
def gather(x, dim, index):
    """index_select called from Python, as a custom op's Python kernel calls an
    op: the run raises inside a function the graph calls."""
    return torch.index_select(x, dim, index)


def gathered(x, index):
    """relu, gather and exp: the graph calls gather, a global fx.wrap keeps."""
    return torch.exp(gather(torch.relu(x), 0, index))


def selected(x, index):
    """The same with the op itself, which a graph the cache stores can hold."""
    return torch.exp(torch.ops.aten.index_select.default(torch.relu(x), 0, index))


class TestRunThatRaises(TestCase):
    # When an op of a run raises, the run's scope ends there instead of holding
    # the caller's later ops until the exception is collected. Through
    # torch.compile the "Torch-Compiled Region" event around the call would
    # end it, so the compilers' callables are called directly.
    GATHER = {"region": "gather"}

    def graph(self, f=gathered):
        """``f`` (:func:`gathered` or :func:`selected`) traced, all its ops in
        the gather region."""
        gm = torch.fx.symbolic_trace(f)
        for node in gm.graph.nodes:
            if node.op == "call_function":
                node.meta["custom"] = self.GATHER
        return gm

    def ops_in_scope_after_raising(self, run):
        """The aten ops inside the gather scope when ``run`` raises for an
        index out of range and the caller then runs a sin."""
        x = torch.randn(4)
        self.assertEqual(run(x, torch.tensor([1])), torch.exp(x.relu()[1:2]))
        errors = []
        with torch.profiler.profile() as prof:
            try:
                run(x, torch.tensor([9]))
            except IndexError as error:
                errors.append(error)  # kept, as a caller that logs it may
            torch.sin(x)
            self.assertIn("index out of range", str(errors.pop()))
            # the traceback held the failed frame, and with it an open scope
            gc.collect()
        return ops_inside(list(prof.events()), scope(self.GATHER))

    def test_aot_eager_scope_ends_where_the_run_raises(self):
        with inductor_config.patch(kernel_annotations=True):
            compiled = debugging._boxed_nop_with_eager_scopes(self.graph(), [])
        inside = self.ops_in_scope_after_raising(lambda *args: compiled(list(args)))
        self.assertIn("aten::index_select", inside)
        self.assertNotIn("aten::sin", inside)

    def test_cached_aot_eager_scope_ends_where_the_run_raises(self):
        # the graph module AOTAutogradCache stores and serves (bundled), under
        # the flag its key holds, keeps the code that ends the scope
        if not hasattr(debugging, "AOTEagerOutputCode"):
            raise unittest.SkipTest("this torch's cache keeps no aot_eager graph")
        with (
            inductor_config.patch(kernel_annotations=True),
            functorch_config.patch(bundled_autograd_cache=True),
        ):
            graph = self.graph(selected)
            stored = debugging._boxed_nop_with_eager_scopes(graph, [])
            stored.prepare_for_serialization()
            served = pickle.loads(pickle.dumps(stored))
            served.post_compile()
        inside = self.ops_in_scope_after_raising(lambda *args: served(list(args)))
        self.assertIn("aten::index_select", inside)
        self.assertNotIn("aten::sin", inside)

    def test_regional_scope_ends_where_the_run_raises(self):
        with inductor_config.patch(kernel_annotations=True):
            compiled = regional_inductor(self.graph())
        # the pass hands out a graph module, with its graph and code
        self.assertIsInstance(compiled, torch.fx.GraphModule)
        inside = self.ops_in_scope_after_raising(compiled)
        self.assertIn("aten::index_select", inside)
        self.assertNotIn("aten::sin", inside)


def raise_first(inner, body):
    """A user's body transformer (Graph.on_generate_code): after ``inner``, a
    first line that raises, so a graph whose code keeps it fails to run."""
    body = inner(body) if inner is not None else body
    return ["raise RuntimeError('the user transformer ran')\n", *body]


def relu_exp(x):
    return torch.exp(torch.relu(x))


class TestUserBodyTransformer(TestCase):
    # From 2.10 boxed_nop (and from 2.12 AOTEagerOutputCode) swaps in the boxed
    # codegen, which drops a body transformer a user's pass registered on the
    # graph it is given; before, boxed_nop runs the graph through an
    # fx.Interpreter, which runs no generated code. Either way the graph runs
    # as traced, flag off or on: with the flag on the boxed codegen keeps only
    # the code that closes the eager scopes of a run.
    REGION = {"region": "exp"}

    def graph(self, annotated=False):
        """relu_exp traced, the user's transformer registered on it (and, when
        ``annotated``, its ops in a region)."""
        gm = torch.fx.symbolic_trace(relu_exp)
        for node in gm.graph.nodes:
            if annotated and node.op == "call_function":
                node.meta["custom"] = self.REGION
        gm.graph.on_generate_code(lambda inner: functools.partial(raise_first, inner))
        gm.recompile()
        self.assertIn("the user transformer ran", gm.code)
        return gm

    def assertRunsAsTraced(self, compiled):
        x = torch.randn(4)
        self.assertEqual(compiled([x]), relu_exp(x))

    def test_compilers_drop_a_user_transformer(self):
        for compiler in (debugging._boxed_nop_with_eager_scopes, boxed_nop):
            for on in (False, True):
                with inductor_config.patch(kernel_annotations=on):
                    compiled = compiler(self.graph(), [])
                self.assertRunsAsTraced(compiled)

    def test_scopes_keep_their_code_only(self):
        # the user's transformer, registered before the scopes', is dropped;
        # the scopes run, with the code that closes them
        gm = self.graph(annotated=True)
        with inductor_config.patch(kernel_annotations=True):
            compiled = debugging._boxed_nop_with_eager_scopes(gm, [])
        self.assertIn("except BaseException:", gm.code)
        with torch.profiler.profile() as prof:
            self.assertRunsAsTraced(compiled)
        names = [e.name for e in scopes(prof.events())]
        self.assertEqual(names, [scope(self.REGION)])

    def test_served_graph_drops_a_user_transformer(self):
        # a graph module AOTAutogradCache stores and serves (bundled), with the
        # user's transformer registered when it is stored
        if not hasattr(debugging, "AOTEagerOutputCode"):
            raise unittest.SkipTest("this torch's cache keeps no aot_eager graph")
        for on in (False, True):
            with inductor_config.patch(kernel_annotations=on):
                stored = debugging.AOTEagerOutputCode(gm=self.graph())
                stored.prepare_for_serialization()
                served = pickle.loads(pickle.dumps(stored))
                served.post_compile()
            self.assertRunsAsTraced(served)


class TestAotAutogradCache(TestCase):
    # From 2.12 AOTAutogradCache keeps the graphs aot_eager runs
    # (AOTEagerOutputCode, with force_autograd_cache and bundled_autograd_cache):
    # a graph compiled with the flag must not serve a call without it, nor the
    # reverse.
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not (
            hasattr(torch._dynamo.backends.debugging, "AOTEagerOutputCode")
            and hasattr(functorch_config, "bundled_autograd_cache")
        ):
            raise unittest.SkipTest(
                "this torch's AOTAutogradCache keeps no aot_eager graph"
            )

    def test_cache_entries_do_not_cross_the_flag(self):
        ON = {"kernel_annotations": True}

        def run(**config):
            torch._dynamo.reset()
            counters.clear()
            model = make()
            with inductor_config.patch(**config):
                compiled = torch.compile(model, backend="aot_eager")
                step(compiled, model)
            with torch.profiler.profile() as prof:
                step(compiled, model)
            cache = counters["aot_autograd"]
            hit = (cache["autograd_cache_hit"], cache["autograd_cache_miss"]) == (1, 0)
            miss = (cache["autograd_cache_hit"], cache["autograd_cache_miss"]) == (0, 1)
            self.assertTrue(hit or miss, dict(cache))
            return "hit" if hit else "miss", bool(scopes(prof.events()))

        with fresh_inductor_cache(), functorch_config.patch(
            force_autograd_cache=True, bundled_autograd_cache=True
        ):
            runs = [run(**config) for config in ({}, ON, {}, ON)]
        # (cache, scopes recorded): each setting misses once, then hits its own entry
        self.assertEqual(
            runs, [("miss", False), ("miss", True), ("hit", False), ("hit", True)]
        )

    def test_keys_of_mixed_types_inside_a_value_are_keyed(self):
        # The cache key holds the annotations' text: keys that cannot be
        # sorted (int and str), one level down, are written in the order of
        # their text, and the step runs in its scope.
        def f(x):
            with fx_traceback.annotate({"cfg": {1: "a", "b": 2}}):
                return torch.relu(x) + 1

        x = torch.randn(4)
        torch._dynamo.reset()
        counters.clear()
        with (
            fresh_inductor_cache(),
            functorch_config.patch(
                force_autograd_cache=True, bundled_autograd_cache=True
            ),
            inductor_config.patch(kernel_annotations=True),
        ):
            compiled = torch.compile(f, backend="aot_eager")
            with torch.profiler.profile() as prof:
                self.assertEqual(compiled(x), f(x))
        torch._dynamo.reset()
        self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 1)
        names = [e.name for e in scopes(prof.events())]
        self.assertEqual(names, ["annotation cfg='{1: 'a', 'b': 2}'"])


class TestRegionalAotAutogradCache(TestCase):
    # From 2.11 AOTAutogradCache keeps the graphs regional_inductor returns
    # (RegionalOutputCode, with force_autograd_cache).
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not hasattr(functorch_config, "force_autograd_cache"):
            raise unittest.SkipTest(
                "this torch's AOTAutogradCache keeps no regional graph"
            )

    def test_regional_graph_with_scopes_is_stored_and_served(self):
        # regional_inductor's graph holds the profiler ops of its scopes:
        # AOTAutogradCache stores it (strict: a graph it cannot store fails the
        # compile) and the next compile is served from the cache, with scopes.
        def run():
            torch._dynamo.reset()
            counters.clear()
            model = make(mlp=COMPILED_MLP)
            backend = aot_autograd(
                fw_compiler=regional_inductor, bw_compiler=regional_inductor
            )
            compiled = torch.compile(model, backend=backend)
            step(compiled, model)
            with torch.profiler.profile() as prof:
                step(compiled, model)
            cache = counters["aot_autograd"]
            names = {e.name for e in scopes(prof.events())}
            return cache["autograd_cache_hit"], cache["autograd_cache_miss"], names

        with (
            fresh_inductor_cache(),
            functorch_config.patch(
                force_autograd_cache=True,
                bundled_autograd_cache=True,
                strict_autograd_cache=True,
            ),
            inductor_config.patch(kernel_annotations=True),
        ):
            stored, served = run(), run()
        torch._dynamo.reset()
        # the first compile misses (its regions' compiles too), the second hits
        self.assertEqual(stored[0], 0)
        self.assertEqual(served[:2], (1, 0))
        self.assertIn(scope(ATTENTION), served[2])
        self.assertEqual(served[2], stored[2])


if __name__ == "__main__":
    run_tests()
