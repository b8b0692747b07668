"""torch._inductor.config.kernel_annotations and the FX wrapper
(local-inductor-kernel-annotations, beyond upstream).

The FX wrapper (``WrapperFxCodegen``, 2.8+) turns the wrapper's lines into an
FX graph and refuses a line it cannot convert, such as a profiler scope. It is
the wrapper in use wherever a backend registers it as its Python wrapper (as
upstream's test_fxir_backend does) and, from 2.9, under ``config.fx_wrapper``:
either way an annotated graph compiles with the flag on, the annotation kept
as a comment line (which the FX graph leaves out) and no scope opened."""
import contextlib
import unittest
from unittest import mock

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache
from torch.testing._internal.common_utils import TestCase, run_tests

try:
    from torch._inductor.codegen.wrapper import CommentLine
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
    from torch.testing._internal.inductor_utils import patch_inductor_backend
except ImportError:  # the FX wrapper came with torch 2.8
    WrapperFxCodegen = None


def mm(a, b):
    with fx_traceback.annotate({"region": "mm"}):
        return a @ b


@unittest.skipIf(WrapperFxCodegen is None, "this torch has no FX wrapper (2.8+)")
class TestKernelAnnotationFxWrapper(TestCase):
    def compile_mm(self, backend_wrapper=None, **config):
        """Compile and run ``mm`` with the flag on, the FX wrapper chosen by
        ``backend_wrapper`` (the CPU backend's Python wrapper) or ``config``;
        the FX wrapper's comment lines and the targets of the graph it made."""
        seen = []
        convert = WrapperFxCodegen.compile_graph

        def compile_graph(wrapper, gm):
            comments = [
                str(line.line) for line in wrapper.lines if isinstance(line, CommentLine)
            ]
            seen.append((comments, [str(n.target) for n in gm.graph.nodes]))
            return convert(wrapper, gm)

        a, b = torch.randn(4, 4), torch.randn(4, 4)
        torch._dynamo.reset()
        backend = contextlib.nullcontext()
        if backend_wrapper is not None:
            backend = patch_inductor_backend("cpu", python_wrapper_codegen=backend_wrapper)
        try:
            with (
                backend,
                mock.patch.object(WrapperFxCodegen, "compile_graph", compile_graph),
                fresh_inductor_cache(),
                inductor_config.patch(kernel_annotations=True, **config),
            ):
                out = torch.compile(mm, backend="inductor")(a, b)
        finally:
            torch._dynamo.reset()
        self.assertEqual(out, a @ b)
        self.assertEqual(len(seen), 1)
        return seen[0]

    def check_comment_and_no_scope(self, comments, targets):
        self.assertEqual(comments.count('# Annotation: {"region": "mm"}'), 1)
        self.assertEqual([t for t in targets if "record_function" in t], [])
        self.assertEqual(len([t for t in targets if "mm" in t]), 1)

    def test_backend_whose_python_wrapper_is_the_fx_wrapper(self):
        self.check_comment_and_no_scope(*self.compile_mm(WrapperFxCodegen))

    @unittest.skipIf(
        not hasattr(inductor_config, "fx_wrapper"), "config.fx_wrapper came with 2.9"
    )
    def test_config_fx_wrapper(self):
        self.check_comment_and_no_scope(*self.compile_mm(fx_wrapper=True))


if __name__ == "__main__":
    run_tests()
