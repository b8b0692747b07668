# Owner(s): ["module: dynamo"]
"""A compiled function called inside an eager torch.fx.traceback.annotate block (patch
local-dynamo-ambient-annotation). Off by default, as upstream: the frame is traced without
the caller's annotation, Dynamo adds no guard on it, and Python guards work. With
torch._dynamo.config.trace_under_caller_annotation (beyond upstream) the frame is traced
under the annotation and guarded on it; results stay eager's either way.
test/oracle/test_oracle_caller_annotation.py compares the default with upstream.
"""
import sys
import warnings
from pathlib import Path

import torch
import torch._dynamo
import torch._dynamo.testing
import torch.fx.traceback as fx_traceback
from torch.testing._internal.common_utils import run_tests, TestCase

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oracle_interpreter import run_json  # noqa: E402
from oracle.programs.caller_annotation_program import BadRepr, by_preserved_node_meta, sin_cos  # noqa: E402

PROGRAM = Path(__file__).resolve().parents[1] / "oracle" / "programs" / "caller_annotation_program.py"

FLAG = "trace_under_caller_annotation"


def guard_names_of(fn, x, annotation):
    """Names of the guards Dynamo adds when ``fn`` is first compiled inside ``annotate(annotation)``."""
    names = set()
    compiled = torch._dynamo.optimize(
        "eager", guard_export_fn=lambda guards: names.update(g.inner_create_fn().__name__ for g in guards))(fn)
    with fx_traceback.annotate(annotation):
        compiled(x)
    return names


class CallerAnnotationTests(TestCase):
    def setUp(self):
        super().setUp()
        torch._dynamo.reset()

    def tearDown(self):
        torch._dynamo.reset()
        super().tearDown()

    def calls_under(self, annotations, flag):
        """Run compiled sin_cos under each annotation (None: outside any); return the
        number of compiles. Every result must equal eager's."""
        counter = torch._dynamo.testing.CompileCounter()
        compiled = torch.compile(sin_cos, backend=counter)
        x = torch.randn(4)
        with torch._dynamo.config.patch(**{FLAG: flag}):
            for annotation in annotations:
                if annotation is None:
                    self.assertEqual(compiled(x), sin_cos(x))
                else:
                    with fx_traceback.annotate(annotation):
                        self.assertEqual(compiled(x), sin_cos(x))
        return counter.frame_count

    def test_off_by_default(self):
        self.assertFalse(getattr(torch._dynamo.config, FLAG))

    def test_guard_on_caller_annotation_only_when_on(self):
        x = torch.randn(4)
        self.assertNotIn("FX_TRACEBACK_ANNOTATION", guard_names_of(sin_cos, x, {"outer": 1}))
        torch._dynamo.reset()
        with torch._dynamo.config.patch(**{FLAG: True}):
            self.assertIn("FX_TRACEBACK_ANNOTATION", guard_names_of(sin_cos, x, {"outer": 1}))

    def test_python_guards_second_call(self):
        # 2.6+ guard only through the C++ guard manager: there the flag exists and is ignored.
        # Plain functions: pristine 2.5.1 cannot build Python guards for an nn.Module call.
        module_globals = set(globals())
        for flag in (False, True):
            with self.subTest(flag=flag), warnings.catch_warnings():
                warnings.simplefilter("error", SyntaxWarning)
                torch._dynamo.reset()
                with torch._dynamo.config.patch(enable_cpp_guard_manager=False):
                    compiles = self.calls_under(
                        [None, None, {"outer": 1}, {"outer": 1}, {"outer": 2}, None], flag)
                # off: one graph for every call; on: one per caller annotation
                self.assertEqual(compiles, 3 if flag else 1)
        # the guard writes no helper into the frame's globals (Dynamo's own __compiled_fn_* are fine)
        self.assertEqual([k for k in set(globals()) - module_globals if "annotation" in k], [])

    def test_same_caller_annotation_reuses_the_graph(self):
        for flag in (False, True):
            with self.subTest(flag=flag):
                torch._dynamo.reset()
                annotations = [{"outer": 1}, {"outer": 1}, None, None, {"outer": 2}, {"outer": 1}]
                self.assertEqual(self.calls_under(annotations, flag), 3 if flag else 1)

    def test_empty_caller_annotation_is_none(self):
        # annotate({}) adds nothing: it needs no graph of its own, and no node gets {}
        self.assertEqual(self.calls_under([{}, None, {}, {"outer": 1}], True), 2)
        torch._dynamo.reset()
        graphs = []
        compiled = torch.compile(sin_cos, backend=lambda gm, _: graphs.append(gm) or gm.forward)
        with torch._dynamo.config.patch(**{FLAG: True}), fx_traceback.annotate({}):
            compiled(torch.randn(4))
        self.assertEqual([n.name for g in graphs for n in g.graph.nodes if "custom" in n.meta], [])

    def test_value_whose_repr_raises(self):
        bad = BadRepr()
        self.assertEqual(self.calls_under([{"v": bad}, {"v": bad}], False), 1)
        # With the flag on the value reaches the Dynamo graph's nodes, and the graph-code
        # printer (upstream's, 2.11+; backported by 173119) calls str() on it whenever a
        # structured trace is taken (TORCH_TRACE, or pytest's log capture): upstream raises
        # there too for such a value. A plain process, as users run, takes none.
        on = run_json(sys.executable, PROGRAM, "on")
        self.assertEqual(on["compiles"]["bad repr"], {"compiles": 1, "same_as_eager": True})

    def test_has_preserved_node_meta_branch_equals_eager(self):
        x = torch.tensor(30.0)
        for flag in (False, True):
            with self.subTest(flag=flag), torch._dynamo.config.patch(**{FLAG: flag}):
                torch._dynamo.reset()
                compiled = torch.compile(by_preserved_node_meta, backend="eager")
                with fx_traceback.annotate({"outer": 1}):
                    self.assertEqual(compiled(x), by_preserved_node_meta(x))
                self.assertEqual(compiled(x), by_preserved_node_meta(x))


if __name__ == "__main__":
    run_tests()
