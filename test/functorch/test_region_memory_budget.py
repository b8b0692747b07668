"""torch.autograd.graph.region_activation_memory_budget (upstream 2.13.0, backported
by 185979-region-memory-budget): the context manager's validation, the
annotation key and its reader in fx.traceback, and the min-cut partitioner
taking the region's budget in place of
torch._functorch.config.activation_memory_budget. On 2.13+ the same tests run
against upstream's own implementation."""
import unittest

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.utils import fresh_inductor_cache
from torch.testing._internal.common_utils import TestCase, run_tests


def saved_for_backward(fn, *args):
    """Compile ``fn`` with the min-cut partitioner and return the forward graph's
    outputs after the user's: the activations it saves for the backward."""
    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"),
                           partition_fn=min_cut_rematerialization_partition)
    torch.compile(fn, backend=backend, fullgraph=True)(*args).backward()
    (output,) = [n for n in graphs["fw"].graph.nodes if n.op == "output"]
    return list(output.args[0][1:])


RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


def block(x, w1, w2):
    return torch.relu(torch.sin(torch.relu(x @ w1)) @ w2).sum()


def inputs():
    return (torch.randn(8, 16), torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True))


class TestRegionActivationMemoryBudget(TestCase):
    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()
        super().tearDown()

    def test_rejects_a_budget_that_is_not_a_ratio(self):
        budget = torch.autograd.graph.region_activation_memory_budget
        with self.assertRaisesRegex(TypeError, "expects a float, got bool"):
            budget(True)
        with self.assertRaisesRegex(TypeError, "expects a float, got str"):
            budget("0.5")
        with self.assertRaisesRegex(ValueError, r"must be in \[0, 1\], got 1.5"):
            budget(1.5)
        with self.assertRaisesRegex(ValueError, r"must be in \[0, 1\], got -0.1"):
            budget(-0.1)

    def test_eager_use_is_an_error(self):
        with self.assertRaisesRegex(RuntimeError, "can only be used inside a torch.compile region"):
            torch.autograd.graph.region_activation_memory_budget(0.5)

    def test_reader_returns_the_annotated_budget(self):
        graph = torch.fx.Graph()
        node = graph.placeholder("x")
        self.assertIsNone(fx_traceback._get_memory_budget_annotation(node))
        node.meta["custom"] = {"region": "mlp"}
        self.assertIsNone(fx_traceback._get_memory_budget_annotation(node))
        node.meta["custom"][fx_traceback.MEMORY_BUDGET_ANNOTATION_KEY] = 0.25
        self.assertEqual(fx_traceback._get_memory_budget_annotation(node), 0.25)

    def test_budget_changes_the_saved_activations(self):
        def under(budget):
            def fn(x, w1, w2):
                with torch.autograd.graph.region_activation_memory_budget(budget):
                    return block(x, w1, w2)
            return fn

        args = inputs()
        nothing_recomputed = saved_for_backward(under(1.0), *args)
        torch._dynamo.reset()
        all_recomputed = saved_for_backward(under(0.0), *args)
        # budget 0.0: the backward recomputes the whole forward from its inputs
        self.assertTrue(all(n.op == "placeholder" for n in all_recomputed))
        self.assertTrue(any(n.op == "call_function" for n in nothing_recomputed))
        # (budget 1.0 saving what the unannotated default saves: test/oracle/test_oracle_memory_budget.py)

    def test_region_budget_overrides_the_global_config(self):
        def fn(x, w1, w2):
            with torch.autograd.graph.region_activation_memory_budget(1.0):
                return block(x, w1, w2)

        with torch._functorch.config.patch(activation_memory_budget=0.0):
            saved = saved_for_backward(fn, *inputs())
        self.assertTrue(any(n.op == "call_function" for n in saved))

    def test_partial_annotation_is_rejected(self):
        def fn(x, w1, w2):
            with torch.autograd.graph.region_activation_memory_budget(0.0):
                h = torch.relu(x @ w1)
            return torch.relu(torch.sin(h) @ w2).sum()

        with self.assertRaisesRegex(Exception, r"must cover the entire forward of a graph .* 4 forward op\(s\) are unannotated"):
            saved_for_backward(fn, *inputs())

    def test_conflicting_budgets_are_rejected(self):
        def fn(x, w1, w2):
            with torch.autograd.graph.region_activation_memory_budget(0.0):
                h = torch.relu(x @ w1)
            with torch.autograd.graph.region_activation_memory_budget(1.0):
                return torch.relu(torch.sin(h) @ w2).sum()

        with self.assertRaisesRegex(Exception, r"conflicting budgets within a single joint graph .*\[0.0, 1.0\]"):
            saved_for_backward(fn, *inputs())

    # upstream 2.13 and 2.14 key only the budget of the graph's first node (2.15 keys every node's)
    @unittest.skipIf((2, 13) <= RELEASE < (2, 15), "upstream's own cache key, first node only")
    def test_a_budget_change_misses_the_warm_aot_autograd_cache(self):
        """The AOTAutograd cache key holds every node's budget: the graph
        input Dynamo creates where ``fn`` reads its shape, before the block,
        is the graph's first node and carries none, so a key read off the
        first node would let the compile under 0.5 reuse the one under 0.0."""
        def under(budget):
            def fn(x, w):
                rows = x.shape[0]  # x becomes a graph input here, outside the block
                with torch.autograd.graph.region_activation_memory_budget(budget):
                    return (x @ w) * rows
            return fn

        counters = torch._dynamo.utils.counters
        # fresh_inductor_cache: a cache folder of its own, and Inductor's in-process caches (the C++ prefix
        # header's path among them) cleared before and after, so no later compile includes a deleted file
        with fresh_inductor_cache(), \
                torch._functorch.config.patch(enable_autograd_cache=True), \
                torch._inductor.config.patch(fx_graph_cache=True):
            counters.clear()
            for budget in (0.0, 0.5):
                torch._dynamo.reset()
                x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
                torch.compile(under(budget))(x, w).backward(torch.ones(4, 8))
            self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 2)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_hit"], 0)


if __name__ == "__main__":
    run_tests()
