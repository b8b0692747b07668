"""Oracle: the tracing state behaviours upstream torch has, we have too.

programs/tracing_state_program.py runs unchanged under this torch (patched
2.5.1) and under upstream torch (TORCH_OVERLAY_ORACLE_PYTHON, default
<repo>/.venv-oracle/bin/python); each prints the per-node metadata of the same
captures. Node lists differ between releases (2.5.1 traces extra detach nodes,
its partitioner tags forward nodes differently), so the comparison is per op
kind. Backward ``custom`` comes from the forward→backward metadata copy, which
is not tracing state and is tested elsewhere.
"""
import json
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "tracing_state_program.py"
IGNORED_TARGETS = {"aten.detach.default"}  # count and placement differ between releases


def is_backward(row):
    return row["partitioner_tag"] == "is_backward" or row["graph"] == "bw" and row["autograd_backward"]


def by_kind(rows, key):
    """{op kind: sorted distinct JSON values of ``key``} over ``rows``."""
    kinds = {}
    for r in rows:
        if r["target"] not in IGNORED_TARGETS:
            kinds.setdefault(r["target"], set()).add(json.dumps(r[key], sort_keys=True))
    return {k: sorted(v) for k, v in kinds.items()}


@requires_oracle
class TestOracleTracingState(OracleProgramCase):
    PROGRAM = PROGRAM

    def captures(self, name):
        return self.ours["captures"][name], self.upstream["captures"][name]

    def test_runs_on_the_intended_torches(self):
        import torch  # ours: the patched release under test, 2.5.1 or any other with a series
        self.assertEqual(self.ours["torch"], torch.__version__)
        self.assertFalse(self.upstream["torch"].startswith("2.5.1"), self.upstream["torch"])

    def test_make_fx_custom_matches_upstream(self):
        ours, upstream = self.captures("make_fx")
        strip = lambda rows: [(r["target"], r["custom"]) for r in rows]  # noqa: E731
        self.assertEqual(strip(ours), strip(upstream))

    def test_forward_custom_per_op_kind_matches_upstream(self):
        # Wherever upstream annotates a forward op kind, we annotate it the same.
        for name in ("aot_function", "aot_export_module"):
            ours, upstream = self.captures(name)
            up = by_kind([r for r in upstream if not is_backward(r)], "custom")
            us = by_kind([r for r in ours if not is_backward(r)], "custom")
            self.assertTrue(up, name)
            for kind, values in up.items():
                if values != ["null"]:
                    self.assertEqual(us.get(kind), values, f"{name}: {kind}")

    def test_autograd_backward_flags_match_upstream(self):
        ours, upstream = self.captures("aot_function")
        up = by_kind([r for r in upstream if is_backward(r)], "autograd_backward")
        us = by_kind([r for r in ours if is_backward(r)], "autograd_backward")
        self.assertEqual(up, {k: ["true"] for k in up})
        for kind in up:
            self.assertEqual(us.get(kind), up[kind], kind)

    def test_no_forward_node_and_no_custom_carries_autograd_backward(self):
        for result in (self.ours, self.upstream):
            for name, rows in result["captures"].items():
                for r in rows:
                    self.assertNotIn("autograd_backward", r["custom"] or {}, (result["torch"], name, r))
                    if not is_backward(r) and r["partitioner_tag"] != "is_backward":
                        self.assertIsNone(r["autograd_backward"], (result["torch"], name, r))

    def test_gradient_accumulation_nodes_match_upstream(self):
        ours, upstream = self.captures("aot_function")
        acc = lambda rows: sorted((r["target"], r["autograd_backward"]) for r in rows if r["is_gradient_acc"])  # noqa: E731
        self.assertEqual(acc(upstream), [("aten.add.Tensor", True)])
        self.assertEqual(acc(ours), acc(upstream))

    def test_backward_seq_nr_pairs_with_forward_like_upstream(self):
        ours, upstream = self.captures("aot_function")
        for rows in (upstream, ours):
            fw = {r["seq_nr"] for r in rows if r["graph"] == "fw"}
            bw = [r for r in rows if r["graph"] == "bw" and r["autograd_backward"]]
            self.assertTrue(bw)
            self.assertEqual([r for r in bw if r["seq_nr"] not in fw], [])

    def test_tracing_state_is_empty_after_all_captures(self):
        self.assertEqual(self.upstream["state_after"], "{}")
        self.assertEqual(self.ours["state_after"], "{}")


if __name__ == "__main__":
    run_tests()
