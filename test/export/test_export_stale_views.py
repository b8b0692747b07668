# Owner(s): ["oncall: export"]
"""Views made stale by a mutation keep the annotation of the block that took them, on every capture path
that functionalizes (166200-view-replay-annotation, local-view-replay-pre-dispatch).

Upstream 2.13 annotates them in a decomposed strict export; under aot_export_module(pre_dispatch=True) it
leaves them without custom, and non-strict export records no custom at all there (local-export-nonstrict-
custom is beyond upstream): both must give what the strict export gives.
"""
import sys
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from torch._functorch.aot_autograd import aot_export_module
from torch.testing._internal.common_utils import run_tests, TestCase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "stale_views_program.py"


def without_internal_keys(rows):
    """Upstream strict export leaks Dynamo's _torchdynamo_disable* keys into custom (local-export-no-internal-
    keys keeps them out here)."""
    return [[op, None if custom is None else {k: v for k, v in custom.items() if not k.startswith("_torchdynamo")}]
            for op, custom in rows]


@requires_oracle
class TestStaleViewsKeepTheirAnnotation(OracleProgramCase):
    PROGRAM = PROGRAM

    def test_strict_export_matches_upstream(self):
        upstream = without_internal_keys(self.upstream["strict"])
        self.assertIn(["slice", {"block": "views"}], upstream)
        self.assertEqual(self.ours["strict"], upstream)

    def test_pre_dispatch_aot_export_matches_strict_export(self):
        self.assertEqual(self.ours["aot_export_pre_dispatch"], without_internal_keys(self.upstream["strict"]))

    def test_non_strict_export_matches_strict_export(self):
        self.assertEqual(self.ours["non_strict"], self.ours["strict"])


class ViewTakenOutsideAnyBlock(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        v = y[1:]  # taken outside any annotate block
        y.add_(1)  # v is now stale: regenerated when used
        with fx_traceback.annotate({"enc": 1}):
            return (v.sin(),)


class TestStaleViewTakenOutsideAnyBlock(TestCase):
    """A stale view keeps the region it was taken in: none here, though the op that uses it (and regenerates
    it) runs inside annotate({"enc": 1}). Upstream 2.13 gives the view regenerated in a decomposed strict
    export {"enc": 1} (and the view's own region when it was taken inside a block)."""

    def check(self, gm):
        rows = [(str(n.target), n.meta.get("custom")) for n in gm.graph.nodes if n.op == "call_function"]
        self.assertEqual([custom for op, custom in rows if "slice" in op], [None] * sum("slice" in op for op, _ in rows))
        self.assertEqual([custom for op, custom in rows if "sin" in op], [{"enc": 1}])

    def test_strict_export_and_decompositions(self):
        ep = torch.export.export(ViewTakenOutsideAnyBlock(), (torch.randn(3, 2),), strict=True)
        self.check(ep.graph_module)
        self.check(ep.run_decompositions().graph_module)

    def test_pre_dispatch_aot_export(self):
        with fx_traceback.preserve_node_meta():
            gm, _ = aot_export_module(ViewTakenOutsideAnyBlock(), (torch.randn(3, 2),), trace_joint=False,
                                      pre_dispatch=True)
        self.check(gm)


class Unannotated(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        v = y[1:]
        y.mul_(2)
        return (v.t(), v)


class TestCallerAnnotationAroundTheExport(TestCase):
    def test_caller_annotation_around_the_export_replays_nothing(self):
        """The caller's eager block is current during the trace, but the traced code annotates nothing: no view
        is replayed under its node, as on the release."""
        with fx_traceback.preserve_node_meta(), fx_traceback.annotate({"caller": 0}):
            gm, _ = aot_export_module(Unannotated(), (torch.randn(3, 2),), trace_joint=False, pre_dispatch=True)
        self.assertEqual([n.name for n in gm.graph.nodes if n.meta.get("is_functional_regenerated")], [])


if __name__ == "__main__":
    run_tests()
