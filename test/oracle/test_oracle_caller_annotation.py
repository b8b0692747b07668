"""Oracle: by default a compiled function called inside an eager annotate block behaves as
upstream's (patch local-dynamo-ambient-annotation, off unless
torch._dynamo.config.trace_under_caller_annotation): the same node annotations, no guard on
the caller's annotation, one compile under any number of annotations, eager's results.

programs/caller_annotation_program.py runs unchanged under this torch and under upstream
torch 2.13 (TORCH_OVERLAY_ORACLE_PYTHON, default <repo>/.venv-oracle/bin/python).
"""
import sys
from pathlib import Path

from torch.testing._internal.common_utils import run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import OracleProgramCase, requires_oracle  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "caller_annotation_program.py"


@requires_oracle
class TestOracleCallerAnnotation(OracleProgramCase):
    PROGRAM = PROGRAM

    def test_upstream_is_what_the_program_expects(self):
        self.assertEqual(self.upstream["traced"]["guards_on_annotation"], [False])
        self.assertEqual(self.upstream["traced"]["dynamo"], [["null"]])

    def test_traced_and_guarded_as_upstream(self):
        self.assertEqual(self.ours["traced"], self.upstream["traced"])

    def test_compiles_as_upstream(self):
        self.assertEqual(self.ours["compiles"], self.upstream["compiles"])

    def test_has_preserved_node_meta_as_upstream(self):
        self.assertEqual(self.ours["preserved_node_meta"], self.upstream["preserved_node_meta"])


if __name__ == "__main__":
    run_tests()
