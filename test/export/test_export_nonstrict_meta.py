# Owner(s): ["oncall: export"]
"""Non-strict torch.export keeps pristine 2.5.1's node metadata (issue 15, item 1).

programs/nonstrict_meta_program.py runs under pristine torch 2.5.1 (a scratch
installation with the overlay reverted), under this torch (patched 2.5.1) and under
upstream torch (the oracle).  On every node, nn_module_stack must equal pristine's,
torch.export.unflatten must work, and the meta keys must be pristine's plus only
those upstream adds; the one addition of ours is "custom", on the nodes traced
inside the annotate() block.  Inside the caller's preserve_node_meta(), nn_module_stack
must still be pristine's (without it) and unflatten must work.
"""
import sys
import tempfile
import unittest
from pathlib import Path

import torch
from torch.testing._internal.common_utils import run_tests, TestCase

TEST = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEST))
sys.path.insert(0, str(TEST / "overlay"))
from oracle_interpreter import oracle_json, requires_oracle, run_json  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "programs" / "nonstrict_meta_program.py"


class NonStrictExportMetaTests(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from scratch_torch import ScratchTorch

        cls.tmp = tempfile.TemporaryDirectory()
        cls.pristine = run_json(ScratchTorch(Path(cls.tmp.name)).python, PROGRAM)
        cls.ours = run_json(sys.executable, PROGRAM)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        super().tearDownClass()

    def test_unflatten_works(self):
        self.assertEqual(self.pristine["unflatten"], "ok")
        self.assertEqual(self.ours["unflatten"], "ok")

    def test_nn_module_stack_equals_pristine_on_every_node(self):
        # pristine is the release under test with the overlay reverted, any release
        self.assertEqual(self.pristine["torch"], torch.__version__)
        self.assertEqual(self.ours["nodes"].keys(), self.pristine["nodes"].keys())
        for name, node in self.ours["nodes"].items():
            self.assertEqual(node["nn_module_stack"], self.pristine["nodes"][name]["nn_module_stack"], name)
        self.assertEqual(self.ours["nodes"]["linear"]["nn_module_stack"]["L__self__block.linear"],
                         ["block.linear", "torch.nn.modules.linear.Linear"])

    def test_inside_preserve_node_meta_nn_module_stack_is_kept(self):
        # Pristine 2.5.1 stores its tracer's live module stack there (empty once tracing
        # ends) and unflatten fails; upstream snapshots it since 2.9.
        ours = self.ours["inside_preserve_node_meta"]
        self.assertEqual(ours["unflatten"], "ok")
        for name, node in ours["nodes"].items():
            self.assertEqual(node["nn_module_stack"], self.pristine["nodes"][name]["nn_module_stack"], name)

    @requires_oracle
    def test_meta_keys_are_pristine_plus_upstream_additions(self):
        annotated = {name: n["custom"] for name, n in self.ours["nodes"].items() if "custom" in n["keys"]}
        self.assertEqual(annotated, {"linear": {"stage": 0}})
        upstream = oracle_json(PROGRAM)
        self.assertTrue(upstream["torch"].startswith("2.13.0"), upstream["torch"])  # the oracle
        for name, node in self.ours["nodes"].items():
            pristine = set(self.pristine["nodes"][name]["keys"])
            allowed = pristine | set(upstream["nodes"].get(name, {}).get("keys", ()))
            self.assertLessEqual(set(node["keys"]) - {"custom"}, allowed, name)
            self.assertLessEqual(pristine, set(node["keys"]), name)


if __name__ == "__main__":
    run_tests()
