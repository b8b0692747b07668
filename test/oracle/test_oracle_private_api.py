"""Oracle: the private fx.traceback helpers keep upstream's names, signatures
and semantics (_set_autograd_backward, _mark/_reset_autograd_backward,
_preserve_node_seq_nr(preserve_seq_nr=...), _get_custom_metadata,
_get_ordered_seq_nr_groups, annotate of key/value pairs).

programs/private_api_program.py runs under this torch and under upstream;
both must print the same, and what they print is what upstream documents.
"""
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "private_api_program.py"


@requires_oracle
class TestOraclePrivateApi(OracleProgramCase):
    PROGRAM = PROGRAM

    def same(self, key):
        self.assertEqual(self.ours[key], self.upstream[key], key)
        return self.ours[key]

    def test_set_autograd_backward_false_leaves_the_enclosing_state(self):
        self.assertEqual(self.same("set_autograd_backward"), [True, True, True, "<absent>"])

    def test_mark_autograd_backward_is_unconditional(self):
        self.assertEqual(self.same("mark_outside_preserve"), [True, "<absent>"])

    def test_preserve_node_seq_nr_takes_upstreams_keyword(self):
        self.assertEqual(self.same("preserve_node_seq_nr"), [True, False, False])

    def test_annotate_takes_key_value_pairs(self):
        self.assertEqual(self.same("annotate_pairs"), {"a": 1, "b": 2})
        self.assertEqual(self.same("after_annotate"), "<absent>")

    def test_get_custom_metadata_output(self):
        self.assertExpectedInline(self.same("get_custom_metadata"), """\
('call_function', 'add', {'pp_stage': 0, 'fsdp_bucket': 0})
('call_function', 'sub', {'pp_stage': 0})""")

    def test_ordered_seq_nr_groups_output(self):
        self.assertEqual(self.same("seq_nr_groups_forward_only"), self.ours["seq_nr_groups_forward_only"])
        self.assertEqual(sorted(n for group in self.ours["seq_nr_groups_forward_only"] for n in group),
                         ["add", "mul", "sub"])

    def test_replay_node_is_none_outside_functionalization(self):
        self.assertIsNone(self.same("replay_node_default"))


if __name__ == "__main__":
    run_tests()
