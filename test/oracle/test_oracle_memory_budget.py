"""Oracle: region_activation_memory_budget makes the min-cut partitioner save
what upstream 2.13 saves (patch 185979-region-memory-budget).

programs/memory_budget_program.py compiles one small graph under budgets 0.0,
0.5 and 1.0 and without a budget, and records the activations the forward
saves (producing op and shape) and the errors of a partial and of a
conflicting annotation, under this torch and under upstream."""
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402


def torch_release():
    import torch

    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@requires_oracle
class TestOracleMemoryBudget(OracleProgramCase):
    PROGRAM = Path(__file__).resolve().parent / "programs" / "memory_budget_program.py"

    def test_budget_moves_the_saved_activations_as_upstream(self):
        for budget in ("0.0", "0.5", "1.0"):
            self.assertEqual(self.ours[f"saved at {budget}"], self.upstream[f"saved at {budget}"], budget)
        # the budget does move them: 0.0 saves only the inputs, 1.0 saves activations
        self.assertEqual({op for op, _ in self.ours["saved at 0.0"]}, {"input"})
        self.assertNotEqual(self.ours["saved at 0.0"], self.ours["saved at 1.0"])

    def test_budget_one_is_the_default_choice(self):
        self.assertEqual(self.ours["saved at 1.0"], self.ours["saved unannotated"])

    def test_partial_and_conflicting_annotations_fail_as_upstream(self):
        self.assertIn("must cover the entire forward", self.upstream["partial"])
        ours, upstream = self.ours["partial"], self.upstream["partial"]
        if torch_release() >= (2, 15):  # 2.15 rewords the advice between the op count and the op list
            ours, upstream = (
                (text.split(" are unannotated.")[0], text.rsplit("Unannotated ops:", 1)[1]) for text in (ours, upstream))
        self.assertEqual(ours, upstream)
        self.assertIn("conflicting budgets", self.upstream["conflicting"])
        self.assertEqual(self.ours["conflicting"], self.upstream["conflicting"])


if __name__ == "__main__":
    run_tests()
