"""annotate({"fallback_to_eager": True}) (upstream 2.13.0, backported by
182745-fallback-to-eager): Inductor's GraphLowering hands the annotated ops to
its fallback handler, so the compiled code calls the ATen op instead of
generating a kernel for it; flex_attention's block-mask construction marks its
argsort that way. On 2.13+ the same tests run against upstream's own code."""
import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests


class TestFallbackToEager(TestCase):
    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()
        super().tearDown()

    def test_annotated_op_runs_through_the_fallback(self):
        # Inductor lowers sin to a generated kernel; annotated, the compiled code calls aten.sin.
        # The whole graph is annotated so that no kernel is compiled at all (C++ builds are slow on CI).
        def fn(x):
            with fx_traceback.annotate({"fallback_to_eager": True}):
                return torch.sin(x)

        x = torch.randn(4, 4)
        result, (code,) = run_and_get_code(torch.compile(fn, backend="inductor", fullgraph=True), x)
        self.assertEqual(result, torch.sin(x))
        self.assertIn("aten.sin.default", code)

    def test_flex_attention_block_mask_argsort_is_annotated(self):
        from torch.nn.attention import flex_attention

        dense = torch.tensor([[[[1, 0, 1], [0, 1, 1], [1, 1, 0]]]], dtype=torch.int32)
        with fx_traceback.preserve_node_meta():
            gm = make_fx(flex_attention._dense_to_ordered)(dense)
        annotated = {str(n.target) for n in gm.graph.nodes if (n.meta.get("custom") or {}).get("fallback_to_eager")}
        self.assertIn("aten.sort.stable", annotated)
        unannotated = {str(n.target) for n in gm.graph.nodes
                       if n.op == "call_function" and not (n.meta.get("custom") or {}).get("fallback_to_eager")}
        self.assertIn("aten.sum.dim_IntList", unannotated)


if __name__ == "__main__":
    run_tests()
