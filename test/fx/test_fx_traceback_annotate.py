"""torch.fx.traceback.annotate / annotate_fn and the tracing state they
write (patches 163673-annotate, 107210-no-state-leaks, local-deep-copy-custom)."""
import sys
from pathlib import Path

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/graph_capture.py when run as a script

from graph_capture import meta_table


def customs(gm):
    return {n.name: n.meta.get("custom") for n in gm.graph.nodes if n.op == "call_function"}


def trace(fn, *args):
    with fx_traceback.preserve_node_meta():
        return make_fx(fn)(*args)


class TestAnnotateApi(TestCase):
    def test_nesting_merges_inner_keys_win_and_restores(self):
        with fx_traceback.annotate({"a": 1, "b": 1}):
            self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 1})
            with fx_traceback.annotate({"b": 2, "c": 3}):
                self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 2, "c": 3})
            self.assertEqual(fx_traceback.current_meta["custom"], {"a": 1, "b": 1})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_state_restored_when_body_raises(self):
        with fx_traceback.annotate({"outer": 0}):
            with self.assertRaisesRegex(ValueError, "inside"):
                with fx_traceback.annotate({"inner": 1}):
                    raise ValueError("inside")
            self.assertEqual(fx_traceback.current_meta["custom"], {"outer": 0})
        self.assertNotIn("custom", fx_traceback.current_meta)

    def test_decorator_forms_and_eager_is_unchanged(self):
        @fx_traceback.annotate({"via": "ctx"})
        def f(x):
            return x.sin() * 2

        @fx_traceback.annotate_fn({"via": "fn"})
        def g(x):
            return x.sin() * 2

        self.assertEqual(g.__name__, "g")
        x = torch.randn(4)
        self.assertEqual(f(x), x.sin() * 2)
        self.assertEqual(g(x), x.sin() * 2)
        self.assertEqual(fx_traceback.current_meta, {})
        self.assertEqual(customs(trace(g, x)), {"sin": {"via": "fn"}, "mul": {"via": "fn"}})
        self.assertEqual(customs(trace(f, x)), {"sin": {"via": "ctx"}, "mul": {"via": "ctx"}})


class TestAnnotateMakeFx(TestCase):
    def test_make_fx_nodes_get_merged_custom(self):
        def f(x):
            with fx_traceback.annotate({"region": "a"}):
                y = x.sin()
                with fx_traceback.annotate({"stage": 1, "region": "b"}):
                    y = y.cos()
            return y.exp()

        self.assertExpectedInline(meta_table(trace(f, torch.randn(3)), columns=("OrigAten", "custom")), """\
OrigAten|custom
aten.sin.default|{'region': 'a'}
aten.cos.default|{'region': 'b', 'stage': 1}
aten.exp.default|""")


class TestNoAliasing(TestCase):
    def test_nodes_own_their_custom(self):
        user = {"tags": ["x"], "cfg": {"k": 1}}

        def f(x):
            with fx_traceback.annotate(user):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        sin, cos = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertEqual(sin.meta["custom"], user)
        self.assertIsNot(sin.meta["custom"], cos.meta["custom"])
        self.assertIsNot(sin.meta["custom"], user)
        self.assertIsNot(sin.meta["custom"]["tags"], cos.meta["custom"]["tags"])
        self.assertIsNot(sin.meta["custom"]["tags"], user["tags"])
        sin.meta["custom"]["tags"].append("edited")
        sin.meta["custom"]["cfg"]["k"] = 2
        self.assertEqual(cos.meta["custom"], {"tags": ["x"], "cfg": {"k": 1}})
        self.assertEqual(user, {"tags": ["x"], "cfg": {"k": 1}})

    def test_flat_annotation_nodes_own_their_custom(self):
        # strings and numbers only: the copy is a plain dict copy, still one per node
        user = {"region": "a", "id": 0, "scale": 0.5, "on": True, "none": None}

        def f(x):
            with fx_traceback.annotate(user):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        sin, cos = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertEqual(sin.meta["custom"], user)
        self.assertIs(type(sin.meta["custom"]), dict)
        self.assertIsNot(sin.meta["custom"], cos.meta["custom"])
        self.assertIsNot(sin.meta["custom"], user)
        sin.meta["custom"]["region"] = "edited"
        sin.meta["custom"]["added"] = 1
        self.assertEqual(cos.meta["custom"], {"region": "a", "id": 0, "scale": 0.5, "on": True, "none": None})
        self.assertEqual(user, {"region": "a", "id": 0, "scale": 0.5, "on": True, "none": None})

    def test_node_custom_is_not_the_tracing_state(self):
        seen = {}

        def f(x):
            with fx_traceback.annotate({"tags": ["x"]}):
                y = x.sin()
                seen["state"] = fx_traceback.current_meta["custom"]
                return y

        gm = trace(f, torch.randn(3))
        (sin,) = [n for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIsNot(sin.meta["custom"], seen["state"])
        self.assertIsNot(sin.meta["custom"]["tags"], seen["state"]["tags"])

    def test_retrace_copies_custom_from_source_node(self):
        def f(x):
            with fx_traceback.annotate({"tags": ["x"]}):
                return x.sin().cos()

        gm = trace(f, torch.randn(3))
        with fx_traceback.preserve_node_meta():
            gm2 = make_fx(torch.fx.Interpreter(gm).run)(torch.randn(3))
        old = [n for n in gm.graph.nodes if n.op == "call_function"]
        new = [n for n in gm2.graph.nodes if n.op == "call_function"]
        self.assertEqual([n.meta["custom"] for n in new], [{"tags": ["x"]}] * 2)
        new[0].meta["custom"]["tags"].append("edited")
        self.assertEqual(old[0].meta["custom"], {"tags": ["x"]})
        self.assertEqual(new[1].meta["custom"], {"tags": ["x"]})


class TestNoStateLeaks(TestCase):
    def test_make_fx_leaves_no_original_aten_behind(self):
        with fx_traceback.preserve_node_meta():
            before = dict(fx_traceback.current_meta)
            trace(lambda x: x.sin(), torch.randn(3))
            self.assertEqual(fx_traceback.current_meta, before)
            gm = make_fx(lambda x: x + 1)(torch.randn(3))
            output = [n for n in gm.graph.nodes if n.op == "output"][0]
            self.assertNotIn("original_aten", output.meta)
        self.assertEqual(fx_traceback.current_meta, {})

    def test_same_capture_twice_gives_identical_tables(self):
        def f(x):
            with fx_traceback.annotate({"r": 1}):
                y = x.sin()
            return y.cos()

        tables = []
        for _ in range(2):
            gm = trace(f, torch.randn(3))
            tables.append(meta_table(gm, columns=("OrigAten", "custom", "autograd_backward")))
        self.assertEqual(tables[0], tables[1])


if __name__ == "__main__":
    run_tests()
