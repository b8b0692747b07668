"""Oracle: torch.export.save writes node.meta["custom"] in upstream's format and a file
saved here reads back under upstream as it does here, and the other way round
(issue 20, items 2 and 3).

The release's serializer writes custom with json.dumps and reads it with json.loads;
upstream (2.13) does the same. programs/export_save_program.py saves a program whose
custom holds an IntEnum, a str-valued Enum, an OrderedDict (also as the graph's whole
custom), a namedtuple, a defaultdict, an int key and a tuple, under this torch and under
the oracle, and each side loads the other's file.
"""
import sys
import tempfile
from pathlib import Path

from torch.testing._internal.common_utils import run_tests, TestCase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import ORACLE_PYTHON, requires_oracle, run_json  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "export_save_program.py"


@requires_oracle
class TestOracleExportSave(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.TemporaryDirectory()
        ours, upstream = Path(cls.tmp.name, "ours.pt2"), Path(cls.tmp.name, "upstream.pt2")
        cls.ours = run_json(sys.executable, PROGRAM, "save", ours)
        cls.upstream = run_json(ORACLE_PYTHON, PROGRAM, "save", upstream)
        cls.upstream_reads_ours = run_json(ORACLE_PYTHON, PROGRAM, "load", ours)
        cls.ours_reads_upstream = run_json(sys.executable, PROGRAM, "load", upstream)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        super().tearDownClass()

    def test_saved_custom_is_upstreams_json(self):
        self.assertTrue(self.upstream["torch"].startswith("2.13.0"), self.upstream["torch"])  # the oracle
        self.assertEqual(sorted(self.ours["saved"]), ["<graph>", "torch.ops.aten.linear.default"])
        self.assertEqual(self.ours["saved"], self.upstream["saved"])

    def test_each_torch_loads_its_own_file(self):
        self.assertEqual(self.ours["loaded"], self.ours["read"])
        self.assertEqual(self.upstream["loaded"], self.upstream["read"])

    def test_upstream_reads_our_file_as_we_do(self):
        self.assertEqual(self.upstream_reads_ours["read"], self.ours["loaded"])
        self.assertLoadsEqualOrRefusesClearly(self.upstream_reads_ours, self.ours["loaded"])

    def test_we_read_upstreams_file_as_upstream_does(self):
        self.assertEqual(self.ours_reads_upstream["read"], self.upstream["loaded"])
        self.assertLoadsEqualOrRefusesClearly(self.ours_reads_upstream, self.upstream["loaded"])

    def assertLoadsEqualOrRefusesClearly(self, reader, expected):
        # torch.export.load refuses a file of another schema major version (2.13 reads
        # no 2.5.1 file, 2.5.1 no 2.13 archive): a clear error, never different values
        if "load_error" in reader:
            self.assertRegex(reader["load_error"], r"schema version|archive|not in a subdirectory")
        else:
            self.assertEqual(reader["loaded"], expected)

if __name__ == "__main__":
    run_tests()
