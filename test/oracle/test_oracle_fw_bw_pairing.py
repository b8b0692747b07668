"""Oracle, per node: the forward→backward copy pairs and annotates exactly as
upstream 2.13 where both trace the same graph (patches 164174-fwd-bw-custom,
181808-fwd-bw-custom-merge), and beyond it only where upstream leaves a
backward node unannotated (local-bw-seq-nr-ranges).

programs/fw_bw_pairing_program.py prints the forward and backward nodes of
each case (name, target, seq_nr relative to the first forward node, custom)
under this torch and under upstream; the lists must be equal node for node.
"""
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "fw_bw_pairing_program.py"


@requires_oracle
class TestOracleFwBwPairing(OracleProgramCase):
    PROGRAM = PROGRAM

    def test_copy_runs_before_dead_code_elimination(self):
        # the backward pairs with the first forward node of its seq_nr as traced
        # (a dead cos), not with the first one left after DCE (the live mul)
        case = self.ours["dead_first_forward_node"]
        self.assertEqual(case, self.upstream["dead_first_forward_node"])
        self.assertEqual([row[3] for row in case["bw"] if row[1] == "aten.mul.Tensor"],
                         [{"region": "traced-first"}])

    def test_empty_forward_annotation_is_copied(self):
        case = self.ours["empty_annotation"]
        self.assertEqual(case, self.upstream["empty_annotation"])
        self.assertEqual([row[3] for row in case["bw"] if row[2] == 0], [{}, {}])

    def test_index_put_through_a_view_annotates_as_upstream(self):
        # upstream 2.13 writes without a view; before 2.13 autograd wraps the op in
        # CopySlices, numbered after the op's forward node (local-bw-seq-nr-ranges):
        # the backward index takes the op's annotation all the same
        def annotations(case):
            return [(row[1], row[3]) for row in case["bw"] if row[1] == "aten.index.Tensor"]

        self.assertEqual(annotations(self.upstream["index_put_on_view"]), [("aten.index.Tensor", {"pp_stage": 0})])
        self.assertEqual(annotations(self.ours["index_put_on_view"]), annotations(self.upstream["index_put_on_view"]))

    def test_inplace_op_on_a_view_annotates_beyond_upstream(self):
        ours, upstream = self.ours["mul_on_view"], self.upstream["mul_on_view"]
        self.assertEqual(ours["fw"], upstream["fw"])
        (mul,) = [row for row in upstream["fw"] if row[1] == "aten.mul.Tensor"]
        # upstream: the ops traced under CopySlices take its own seq_nr, mul's + 1,
        # which no forward node has, and so no annotation
        forward_seq_nrs = {row[2] for row in upstream["fw"]}
        unpaired = [row for row in upstream["bw"] if row[2] not in forward_seq_nrs]
        self.assertEqual({(row[2], str(row[3])) for row in unpaired}, {(mul[2] + 1, "None")})
        self.assertIn("aten.mul.Tensor", [row[1] for row in unpaired])
        # ours: the same backward graph and seq_nrs, those ops annotated as mul is
        expected = [[row[0], row[1], row[2], mul[3]] if row in unpaired else row for row in upstream["bw"]]
        self.assertEqual(ours["bw"], expected)

if __name__ == "__main__":
    run_tests()
