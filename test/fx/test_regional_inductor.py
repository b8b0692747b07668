"""torch.fx.passes.regional_inductor: the ops traced under
annotate({"compile_with_inductor": ...}) are compiled by Inductor, forward and backward, with the
annotation's inductor_configs; every other op runs as traced.  Native from 2.10.0; on 2.5.1-2.9.1 the
patches 164776-regional-inductor, 166269-regional-inductor-configs, local-regional-inductor-boxed-call and
(before 2.8) local-regional-inductor-compile-fx; on every release the marked nodes are grouped by
local-regional-inductor-linear-partitions (test_regional_partitions.py).  The annotation's
"inductor_region" key, which keeps regions apart, is native from 2.12 and backported to 2.5.1-2.11.0
(179209-regional-inductor-region-ids).  The same tests run against upstream's own pass on 2.10+.

Inductor compiles on CPU with a C++ compiler, so every test compiles as few regions as it can."""
import copy
import operator
import os
import unittest
import warnings

import torch
import torch._inductor.config as inductor_config
import torch._inductor.test_case
import torch.fx.traceback as fx_traceback
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.utils import run_fw_bw_and_get_code
from torch.fx.passes.regional_inductor import _create_inductor_marked_regions, regional_inductor
from torch.testing._internal.common_utils import run_tests


def aot_eager_regional_inductor(returned_graphs):
    """AOTAutograd with regional_inductor as forward and backward compiler; each graph it returns is
    appended to ``returned_graphs``."""

    def compiler(gm, example_inputs):
        out = regional_inductor(gm, *example_inputs)
        returned_graphs.append(out)
        return out

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


def two_regions(x, y, z):
    """Two marked regions with an unmarked op between them, the first with inductor_configs."""
    with fx_traceback.annotate(
        {"compile_with_inductor": {"inductor_configs": {"fallback_random": True}}}
    ):
        a = x * y + 1
    b = torch.sin(a)
    with fx_traceback.annotate({"compile_with_inductor": 0}):
        c = b * z - 1
    return torch.sin(c)


def side_by_side_regions(x, y):
    """Two marked regions next to each other, told apart by their inductor_region ids, each with
    inductor_configs of its own, and an unmarked op taking both results."""
    with fx_traceback.annotate(
        {"compile_with_inductor": {"inductor_region": 0, "inductor_configs": {"fallback_random": True}}}
    ):
        a = torch.sin(x * y)
    with fx_traceback.annotate(
        {"compile_with_inductor": {"inductor_region": 1, "inductor_configs": {"fallback_random": False}}}
    ):
        b = torch.cos(x + y)
    return a - b


def traced_ops(gm):
    """How many compiled regions a graph returned by regional_inductor calls, and the ATen ops it still
    runs itself (what Inductor did not take), sorted (the backward graph's order differs by release)."""
    ops, regions = [], 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if isinstance(node.target, torch._ops.OpOverload):
            ops.append(str(node.target))
        else:
            regions += 1
    return f"{regions} regions, traced: {' '.join(sorted(ops))}"


# Inductor compiles C++ on CPU: the compiling test costs about 20 s of CPU, more than CI's share per release.
# It runs where the code path differs: 2.5.1 (compile_fx and the pass's own grouping, the reference series),
# 2.9.1 (standalone_compile) and 2.10.0 (upstream's own pass, first release); REGIONAL_INDUCTOR_ALL=1 runs it
# on any release.
COMPILING_RELEASES = {"2.5.1", "2.9.1", "2.10.0"}
RUN_COMPILING = torch.__version__.split("+")[0] in COMPILING_RELEASES or os.environ.get("REGIONAL_INDUCTOR_ALL") == "1"


class RegionalInductorTests(torch._inductor.test_case.TestCase):
    # One compilation serves every check of Inductor's work (forward, backward, configs, results).
    def compile_regions(self, fn, n_inputs):
        """Compile ``fn`` with regional Inductor behind aot_eager and run its forward and backward once.
        Returns (inputs, output, Inductor's generated codes, "fallback_random=<config>: <ops>" per graph
        Inductor compiled, the graphs regional_inductor returned)."""
        compiled_by_inductor = []

        def record(graph):  # a post-grad pass: Inductor runs it on each graph it compiles
            ops = sorted(str(n.target) for n in graph.nodes if n.op == "call_function")
            compiled_by_inductor.append(f"fallback_random={inductor_config.fallback_random}: {' '.join(ops)}")

        returned = []
        opt_fn = torch.compile(fn, backend=aot_eager_regional_inductor(returned), fullgraph=True)
        inputs = [torch.randn(10, requires_grad=True) for _ in range(n_inputs)]
        with inductor_config.patch(post_grad_custom_post_pass=record, fx_graph_cache=False), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, codes = run_fw_bw_and_get_code(lambda: opt_fn(*inputs))
        # The graphs regional_inductor returns take AOTAutograd's boxed arguments.
        self.assertEqual([str(w.message) for w in caught if "take boxed arguments" in str(w.message)], [])
        return inputs, out, codes, compiled_by_inductor, returned

    def assert_equals_eager(self, fn, inputs, out):
        """The compiled output and the inputs' gradients equal eager's."""
        eager = [t.detach().clone().requires_grad_() for t in inputs]
        expected = fn(*eager)
        expected.sum().backward()
        self.assertEqual(out, expected)
        self.assertEqual([t.grad for t in inputs], [t.grad for t in eager])

    @unittest.skipUnless(RUN_COMPILING, f"compiles C++; CI runs it on {sorted(COMPILING_RELEASES)}")
    def test_marked_regions_compiled_forward_and_backward_with_their_configs(self):
        inputs, out, codes, compiled_by_inductor, returned = self.compile_regions(two_regions, 3)

        # Two regions in the forward graph and two in the backward graph, each compiled by Inductor with
        # the inductor_configs of its annotation; the unmarked ops (sin, and its backward) stay as traced.
        # The backward's mul for z's gradient depends on nothing between the regions, and the partitioner
        # groups it with the first region, whose configs apply (as upstream: every marked node is alike to
        # the partitioner; the "inductor_region" key tells regions apart, test below).
        self.assertEqual(len(codes), 4)
        self.assertExpectedInline("\n".join(sorted(compiled_by_inductor)), """\
fallback_random=False: aten.mul.Tensor
fallback_random=False: aten.mul.Tensor aten.sub.Tensor
fallback_random=True: aten.add.Tensor aten.mul.Tensor
fallback_random=True: aten.mul.Tensor aten.mul.Tensor aten.mul.Tensor""")
        self.assertExpectedInline("\n".join(traced_ops(g) for g in returned), """\
2 regions, traced: aten.sin.default aten.sin.default
2 regions, traced: aten.cos.default aten.cos.default aten.mul.Tensor aten.mul.Tensor""")
        self.assertFalse(inductor_config.fallback_random)
        self.assert_equals_eager(two_regions, inputs, out)
        # A copy stays boxed (AOTAutograd's caches and the minifier deepcopy graphs).
        self.assertEqual([getattr(copy.deepcopy(g), "_boxed_call", False) for g in returned], [True, True])

    @unittest.skipUnless(RUN_COMPILING, f"compiles C++; CI runs it on {sorted(COMPILING_RELEASES)}")
    def test_inductor_region_ids_compile_regions_apart(self):
        inputs, out, codes, compiled_by_inductor, returned = self.compile_regions(side_by_side_regions, 2)

        # Each region id is compiled on its own with its inductor_configs, in the forward graph and in the
        # backward graph (its ops carry their forward op's annotation); without the ids the partitioner puts
        # both regions in one submodule, compiled with the first region's configs.  (The regions take no
        # input from each other: upstream, through 2.15, takes a region's configs from the first of its
        # nodes with an annotation, placeholders included, so a region fed by another takes the other's.)
        self.assertEqual(len(codes), 4)
        self.assertExpectedInline("\n".join(sorted(compiled_by_inductor)), """\
fallback_random=False: aten.add.Tensor aten.cos.default
fallback_random=False: aten.mul.Tensor aten.neg.default aten.sin.default
fallback_random=True: aten.cos.default aten.mul.Tensor aten.mul.Tensor aten.mul.Tensor
fallback_random=True: aten.mul.Tensor aten.sin.default""")
        self.assertExpectedInline("\n".join(traced_ops(g) for g in returned), """\
2 regions, traced: aten.sub.Tensor
2 regions, traced: aten.add.Tensor aten.add.Tensor aten.neg.default""")
        self.assert_equals_eager(side_by_side_regions, inputs, out)

    def test_inductor_region_ids_group_marked_nodes(self):
        """Marked nodes of different inductor_region ids go to different submodules even where one takes the
        other's result; annotations with equal ids, and those without the key, each make one (without
        compiling)."""
        graph = torch.fx.Graph()
        x, y = graph.placeholder("x"), graph.placeholder("y")
        aten = torch.ops.aten

        def op(target, *args, mark):
            node = graph.call_function(target, args)
            node.meta["custom"] = {"compile_with_inductor": mark}
            return node

        a = op(aten.mul.Tensor, x, y, mark={"inductor_region": "r0", "inductor_configs": {"fallback_random": True}})
        b = op(aten.add.Tensor, a, y, mark={"inductor_region": "r1"})
        c = op(aten.mul.Tensor, b, b, mark={"inductor_region": "r1", "inductor_configs": {}})
        d = op(aten.add.Tensor, c, x, mark=0)
        e = op(aten.mul.Tensor, d, y, mark={"inductor_configs": {}})
        graph.output(e)
        gm = _create_inductor_marked_regions(torch.fx.GraphModule(torch.nn.Module(), graph))
        regions = []
        for node in gm.graph.nodes:
            if node.op == "call_module":
                ops = sorted(n.name for n in getattr(gm, node.target).graph.nodes if n.op == "call_function")
                regions.append(f"{node.target}: {' '.join(ops)}")
        self.assertExpectedInline("\n".join(regions), """\
__marked_inductor_submod0: mul_tensor
__marked_inductor_submod1: add_tensor mul_tensor_1
__marked_inductor_submod2: add_tensor_1 mul_tensor_2""")

    def test_regions_grouped_as_upstream(self):
        """The marked nodes are grouped, and the groups numbered, as upstream's partitioner does (without
        compiling: _create_inductor_marked_regions is the pass's first phase, private, in 2.10-2.15)."""
        graph = torch.fx.Graph()
        x, y = graph.placeholder("x"), graph.placeholder("y")
        aten = torch.ops.aten

        def op(target, *args, marked=True):
            node = graph.call_function(target, args)
            if marked:
                node.meta["custom"] = {"compile_with_inductor": 0}
            return node

        a = op(aten.mul.Tensor, x, y)
        b = op(aten.add.Tensor, x, y)
        c = op(aten.add.Tensor, x, y)
        d = op(aten.mul.Tensor, x, b, marked=False)
        e = op(aten.add.Tensor, d, y)
        graph.output((a, c, e))
        gm = _create_inductor_marked_regions(torch.fx.GraphModule(torch.nn.Module(), graph))
        regions = []
        for node in gm.graph.nodes:
            if node.op == "call_module":
                ops = sorted(n.name for n in getattr(gm, node.target).graph.nodes if n.op == "call_function")
                regions.append(f"{node.target}: {' '.join(ops)}")
        self.assertExpectedInline("\n".join(sorted(regions)), """\
__marked_inductor_submod0: add_tensor_1 add_tensor_2 mul_tensor
__marked_inductor_submod1: add_tensor""")

    def test_invalid_inductor_config(self):
        def fn(x, y):
            with fx_traceback.annotate(
                {"compile_with_inductor": {"inductor_configs": {"invalid_config_key": True}}}
            ):
                return x * y + 1

        opt_fn = torch.compile(fn, backend=aot_eager_regional_inductor([]), fullgraph=True)
        x = torch.randn(10, requires_grad=True)
        y = torch.randn(10, requires_grad=True)
        with self.assertRaisesRegex(
            torch._dynamo.exc.BackendCompilerFailed, "Invalid inductor config key 'invalid_config_key'"
        ):
            opt_fn(x, y)

    # before 2.8 regions compile with compile_fx (local-regional-inductor-compile-fx); from 2.8 the
    # release's standalone_compile raises its own error there, as upstream's pass does
    @unittest.skipIf(hasattr(torch._inductor, "standalone_compile"), "the release's standalone_compile")
    def test_outside_torch_compile_is_a_clear_error_and_changes_nothing(self):
        from torch.fx.experimental.proxy_tensor import make_fx

        with fx_traceback.preserve_node_meta():
            gm = make_fx(two_regions)(torch.randn(4), torch.randn(4), torch.randn(4))
        code = gm.code
        with self.assertRaisesRegex(
            RuntimeError,
            r"regional_inductor was called outside torch.compile\. Use it as AOTAutograd's compiler "
            r"under torch.compile: .*aot_autograd\(fw_compiler=regional_inductor, .* The graph was left "
            r"unchanged\.",
        ):
            regional_inductor(gm, torch.randn(4), torch.randn(4), torch.randn(4))
        self.assertEqual(gm.code, code)
        self.assertEqual(list(gm.named_children()), [])

    def test_outside_torch_compile_a_graph_without_marks_comes_back_as_it_was(self):
        from torch.fx.experimental.proxy_tensor import make_fx

        gm = make_fx(torch.sin)(torch.randn(4))
        self.assertIs(regional_inductor(gm, torch.randn(4)), gm)


if __name__ == "__main__":
    run_tests()
