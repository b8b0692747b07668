"""Nothing annotated: a view of a mutated tensor gives the pristine release's
forward and backward graph code, node names and order included
(local-view-replay-keeps-names).

Functionalization regenerates a stale view lazily; the kernel of a view op
leaves its stale input alone. The view-replay backport synced the inputs of
every op first, so for a view op it traced the replay earlier than the
release: nodes moved and names were used up (as_strided_8 became
as_strided_9 in upstream test_aotdispatch's
test_input_mutation_aliases_and_output_alias). programs/view_replay_names_program.py
runs under this torch and under a pristine copy of the same installation
(the saved originals: test/overlay/scratch_torch.py), and the graph code
must be equal.
"""
import sys
import tempfile
from pathlib import Path

from torch.testing._internal.common_utils import TestCase, run_tests

TEST_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TEST_ROOT), str(TEST_ROOT / "overlay")]
from oracle_interpreter import run_json  # noqa: E402
from scratch_torch import ScratchTorch  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "view_replay_names_program.py"


class TestViewReplayPristineNames(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._scratch_dir = tempfile.TemporaryDirectory()
        pristine = ScratchTorch(Path(cls._scratch_dir.name))
        cls.pristine = run_json(pristine.python, PROGRAM)
        cls.ours = run_json(sys.executable, PROGRAM)

    @classmethod
    def tearDownClass(cls):
        cls._scratch_dir.cleanup()
        super().tearDownClass()

    def check(self, case):
        for kind in ("fw", "bw"):
            self.assertEqual(self.ours[case][kind], self.pristine[case][kind], f"{case} {kind}")

    def test_output_view_of_a_mutated_alias(self):
        self.check("output_view_of_mutated_alias")

    def test_inplace_view_of_a_mutated_alias(self):
        self.check("inplace_view_of_mutated_alias")

    def test_compiled_views_of_a_mutated_tensor(self):
        self.check("views_of_a_mutated_tensor")


if __name__ == "__main__":
    run_tests()
