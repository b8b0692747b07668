"""Oracle: the annotations backward ops get from their forward ops match upstream.

programs/fw_bw_annotation_program.py runs the same annotated programs (MLP with
functional activations, conv/bn, transformer block with SDPA, a custom
autograd.Function annotating its backward, non-reentrant checkpoint) under this
torch (patched 2.5.1) and under upstream torch (TORCH_OVERLAY_ORACLE_PYTHON,
default <repo>/.venv-oracle/bin/python). Node lists differ between releases, so
the comparison is per backward op kind: the set of ``custom`` values; and, for
the programs whose graphs are the same op for op on both sides, per node, matched
by seq_nr and target. flex_attention is not compared: torch >= 2.11 refuses its
backward on CPU.
"""
import json
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "fw_bw_annotation_program.py"
IGNORED_TARGETS = {"aten.detach.default"}  # count and placement differ between releases


def backward_ops(rows):
    return [r for r in rows if r["graph"] == "bw" and not r["is_gradient_acc"]
            and (r["partitioner_tag"] == "is_backward" or r["autograd_backward"])
            and r["target"] not in IGNORED_TARGETS]


def custom_by_kind(rows):
    kinds = {}
    for r in rows:
        kinds.setdefault(r["target"], set()).add(json.dumps(r["custom"], sort_keys=True))
    return {k: sorted(v) for k, v in kinds.items()}


@requires_oracle
class TestOracleFwBwAnnotations(OracleProgramCase):
    PROGRAM = PROGRAM

    def test_runs_on_the_intended_torches(self):
        import torch  # ours: the patched release under test, 2.5.1 or any other with a series
        self.assertEqual(self.ours["torch"], torch.__version__)
        self.assertFalse(self.upstream["torch"].startswith("2.5.1"), self.upstream["torch"])
        self.assertEqual(set(self.ours["programs"]), set(self.upstream["programs"]))

    def test_backward_custom_per_op_kind_matches_upstream(self):
        for name, upstream_rows in self.upstream["programs"].items():
            up = custom_by_kind(backward_ops(upstream_rows))
            us = custom_by_kind(backward_ops(self.ours["programs"][name]))
            self.assertTrue(any(v != ["null"] for v in up.values()), name)
            self.assertLessEqual(set(us), set(up), name)
            for kind, values in up.items():
                if kind in us:
                    self.assertEqual(us[kind], values, f"{name}: {kind}")
                else:  # releases decompose differently (2.13 keeps SDPA's CPU flash kernel)
                    self.assertNotIn("backward", kind, f"{name}: {kind} missing")

    def test_same_graphs_match_upstream_node_for_node(self):
        """Where both releases trace the same ops (detach aside), every node has
        the same seq_nr (relative), custom and autograd_backward as upstream's."""
        def shape(rows):
            return [(r["graph"], r["subgraph"], r["target"]) for r in rows if r["target"] not in IGNORED_TARGETS]

        def per_node(rows):
            return sorted(json.dumps([r["graph"], r["subgraph"], r["target"], r["seq_nr"], r["custom"],
                                      r["autograd_backward"]], sort_keys=True)
                          for r in rows if r["target"] not in IGNORED_TARGETS)

        compared = []
        for name, upstream_rows in self.upstream["programs"].items():
            ours = self.ours["programs"][name]
            if sorted(shape(ours)) != sorted(shape(upstream_rows)):
                continue
            compared.append(name)
            self.assertEqual(per_node(ours), per_node(upstream_rows), name)
        self.assertGreaterEqual(len(compared), 2, compared)

    def test_gradient_accumulation_stays_unannotated_like_upstream(self):
        for result in (self.ours, self.upstream):
            for name, rows in result["programs"].items():
                for r in rows:
                    if r["is_gradient_acc"]:
                        self.assertIsNone(r["custom"], (result["torch"], name, r))
        acc = lambda result: sorted(  # noqa: E731
            (name, r["target"]) for name, rows in result["programs"].items() for r in rows if r["is_gradient_acc"])
        self.assertTrue(acc(self.upstream))
        self.assertEqual(acc(self.ours), acc(self.upstream))

    def test_custom_never_holds_autograd_backward(self):
        for result in (self.ours, self.upstream):
            for name, rows in result["programs"].items():
                for r in rows:
                    self.assertNotIn("autograd_backward", r["custom"] or {}, (result["torch"], name, r))


if __name__ == "__main__":
    run_tests()
