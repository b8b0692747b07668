"""Oracle, per node: the forward→backward copy pairs and annotates exactly as
upstream 2.13 where both trace the same graph (patches 164174-fwd-bw-custom,
upstream-fwd-bw-custom-merge).

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


if __name__ == "__main__":
    run_tests()
