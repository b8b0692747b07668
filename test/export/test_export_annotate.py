# Owner(s): ["oncall: export"]
"""torch.fx.traceback.annotate under torch.export (patches 164678-dynamo-annotate and
local-export-annotate): strict and non-strict exports carry node.meta["custom"] without a
user preserve_node_meta(), hold no internal keys in it, and keep it through
run_decompositions() and torch.export.save/load.  save/load gives custom back equal and
of the same types, or save fails naming the node, the annotation key and the type.
"""
import io
import json
import sys
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from torch._export.serde.serialize import SerializeError
from torch.testing._internal.common_utils import run_tests, TestCase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import ORACLE_PYTHON, requires_oracle, run_json  # noqa: E402



class Annotated(torch.nn.Module):
    def __init__(self, annotation=None):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.annotation = annotation or {"stage": 0, "cfg": {"bucket": [1, 2]}}

    def forward(self, x):
        with fx_traceback.annotate(self.annotation):
            y = self.lin(x)
        return torch.nn.functional.relu(y)


def customs(ep):
    """{call_function node target name: custom} of an ExportedProgram."""
    return {str(n.target): n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"}


def round_trip(ep):
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


EXPECTED_CUSTOM = {"stage": 0, "cfg": {"bucket": [1, 2]}}


class ExportAnnotateTests(TestCase):
    def export(self, strict, module=None):
        torch._dynamo.reset()
        ep = torch.export.export(module or Annotated(), (torch.randn(2, 4),), strict=strict)
        self.assertNotIn("custom", fx_traceback.current_meta)
        self.assertFalse(fx_traceback.has_preserved_node_meta())
        return ep

    def test_strict_and_non_strict_carry_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                self.assertEqual(customs(self.export(strict)),
                                 {"aten.linear.default": EXPECTED_CUSTOM, "aten.relu.default": None})

    def test_no_internal_keys_in_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                ep = self.export(strict)
                annotated = [n.meta["custom"] for n in ep.graph.nodes if "custom" in n.meta]
                self.assertTrue(annotated)
                for custom in annotated:
                    self.assertEqual(sorted(custom), ["cfg", "stage"])

    def test_run_decompositions_keeps_custom(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                decomposed = customs(self.export(strict).run_decompositions())
                self.assertNotIn("aten.linear.default", decomposed)
                self.assertEqual(decomposed, {"aten.permute.default": EXPECTED_CUSTOM,
                                              "aten.addmm.default": EXPECTED_CUSTOM,
                                              "aten.relu.default": None})

    def test_save_load_round_trip(self):
        for strict in (True, False):
            with self.subTest(strict=strict):
                ep = self.export(strict)
                loaded = round_trip(ep)
                self.assertEqual(customs(loaded), customs(ep))
                self.assertEqual(customs(round_trip(ep.run_decompositions()))["aten.addmm.default"],
                                 EXPECTED_CUSTOM)
                x = torch.randn(2, 4)
                self.assertEqual(loaded.module()(x), ep.module()(x))

    def test_unserialisable_annotation_is_a_save_time_error_naming_the_key(self):
        # non-strict runs annotate eagerly, so any Python value can reach custom
        ep = self.export(False, Annotated({"stage": 0, "devices": {"cpu", "meta"}}))
        self.assertEqual(customs(ep)["aten.linear.default"]["devices"], {"cpu", "meta"})
        with self.assertRaisesRegex(Exception, r"annotation key 'devices' holds a value of type set"):
            torch.export.save(ep, io.BytesIO())


def typed(value):
    """``value`` with the type of every container, key and leaf spelled out, so
    that equal-but-retyped values (1 vs "1", a tuple vs a list) compare unequal."""
    if isinstance(value, dict):
        return ("dict", sorted((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


class SaveLoadCustomExactlyTests(TestCase):
    """torch.export.save/load gives custom back equal and of the same types, or
    save fails naming the key and the type (issue 10, item 9)."""

    def exported(self, custom):
        ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=False)
        linear = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.linear.default)
        linear.meta["custom"] = custom
        return ep

    def loaded_custom(self, custom):
        loaded = round_trip(self.exported(custom))
        return next(n for n in loaded.graph.nodes
                    if n.target == torch.ops.aten.linear.default).meta.get("custom", "<missing>")

    def test_json_values_and_empty_custom_come_back_exactly(self):
        custom = {"s": "a", "i": 1, "f": 0.5, "b": True, "n": None,
                  "l": [1, "x", [2.0, False]], "d": {"k": {"kk": [None]}}}
        self.assertEqual(typed(self.loaded_custom(custom)), typed(custom))
        self.assertEqual(self.loaded_custom({}), {})

    def assertSaveFails(self, custom, *fragments):
        with self.assertRaises(SerializeError) as caught:
            torch.export.save(self.exported(custom), io.BytesIO())
        message = str(caught.exception)
        for fragment in ("node linear", "Nothing was written") + fragments:
            self.assertIn(fragment, message)

    def test_int_keys_and_tuples_come_back_exactly(self):
        custom = {3: "x", "mesh": (0, 1), "cfg": [1, (2, 3)], "buckets": {0: "a", (1, 2): [None, ()]},
                  2.5: {True: {}}, None: [[]]}
        self.assertEqual(typed(self.loaded_custom(custom)), typed(custom))

    def test_a_key_named_like_the_typed_form_comes_back_exactly(self):
        for custom in ({"__typed_custom__": ["dict", []]}, {"__typed_custom__": (1,), 0: 1}):
            self.assertEqual(typed(self.loaded_custom(custom)), typed(custom))

    def test_plain_json_custom_is_saved_as_plain_json(self):
        # the form upstream writes and reads: only custom that JSON would change is saved typed
        from torch._export.serde.serialize import serialize

        custom = {"s": "a", "l": [1, {"k": None}]}
        program = json.loads(serialize(self.exported(custom)).exported_program)
        saved = [node["metadata"]["custom"] for node in program["graph_module"]["graph"]["nodes"]
                 if "custom" in node["metadata"]]
        self.assertIn(json.dumps(custom), saved)

    def test_unsaveable_key_inside_a_value_fails(self):
        self.assertSaveFails({"buckets": {frozenset(): "a"}}, "annotation key 'buckets'",
                             "a value of type frozenset at a key of 'buckets'")

    def test_unsaveable_annotation_key_fails(self):
        self.assertSaveFails({frozenset(): "x"}, "annotation key frozenset() is of type frozenset")

    def test_unsaveable_value_nested_in_a_tuple_fails(self):
        self.assertSaveFails({"cfg": [1, (2, {3})]}, "annotation key 'cfg'", "of type set at 'cfg'[1][1]")

    def test_non_str_leaf_fails(self):
        class Tag(str):
            pass

        self.assertSaveFails({"tag": Tag("a")}, "annotation key 'tag'", "of type Tag")

    def test_graph_level_custom_is_checked_too(self):
        ep = self.exported({"ok": 1})
        ep.graph_module.meta["custom"] = {"mesh": {0, 1}}
        with self.assertRaisesRegex(SerializeError, r"the graph: annotation key 'mesh' holds a value of type set"):
            torch.export.save(ep, io.BytesIO())
        ep.graph_module.meta["custom"] = {0: ("mesh",)}
        loaded = round_trip(ep)
        self.assertEqual(typed(loaded.graph_module.meta["custom"]), typed({0: ("mesh",)}))


ORACLE_SNIPPET = """
import json, torch, torch.fx.traceback as fx_traceback
class Annotated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        with fx_traceback.annotate({"stage": 0, "cfg": {"bucket": [1, 2]}}):
            y = self.lin(x)
        return torch.nn.functional.relu(y)
ep = torch.export.export(Annotated(), (torch.randn(2, 4),), strict=True)
out = {"export": {str(n.target): n.meta.get("custom") for n in ep.graph.nodes if n.op == "call_function"},
       "decomposed": {str(n.target): n.meta.get("custom") for n in ep.run_decompositions().graph.nodes
                      if n.op == "call_function"}}
print(json.dumps(out, sort_keys=True))
"""


@requires_oracle
class ExportAnnotateOracleTests(TestCase):
    def test_strict_export_matches_upstream(self):
        upstream = run_json(ORACLE_PYTHON, "-c", ORACLE_SNIPPET)
        self.assertEqual(upstream["export"]["aten.linear.default"], EXPECTED_CUSTOM)
        self.assertEqual(run_json(sys.executable, "-c", ORACLE_SNIPPET), upstream)


if __name__ == "__main__":
    run_tests()
