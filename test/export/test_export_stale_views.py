# Owner(s): ["oncall: export"]
"""Views made stale by a mutation keep the annotation of the block that took them, on every capture path
that functionalizes (166200-view-replay-annotation, local-view-replay-pre-dispatch).

Upstream 2.13 annotates them in a decomposed strict export; under aot_export_module(pre_dispatch=True) it
leaves them without custom, and non-strict export records no custom at all there (local-export-nonstrict-
custom is beyond upstream): both must give what the strict export gives.
"""
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

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


if __name__ == "__main__":
    run_tests()
