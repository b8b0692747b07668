"""torch._inductor.config.kernel_annotations and annotations beyond ASCII
(local-inductor-kernel-annotations, beyond upstream).

The Chrome trace writer of recent releases (2.8.0, 2.9.1, 2.13.0; not
2.5.1) writes an event name that holds a character beyond ASCII as "unknown",
so a scope's name writes such a character as its JSON escape (the backslash
as "/"), in keys and values alike: the trace and the profiler events then
name the region with the same text on every release."""
import json
import os
import tempfile

import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache
from torch.testing._internal.common_utils import TestCase, run_tests

# {"région": "café"} and its scope
REGION = {"r\u00e9gion": "caf\u00e9"}
SCOPE = "annotation r/u00e9gion='caf/u00e9'"


def f(x, w):
    with fx_traceback.annotate(REGION):
        return torch.relu(x @ w) + 1


class TestKernelAnnotationNonAscii(TestCase):
    def test_scope_names_beyond_ascii_survive_the_chrome_trace(self):
        x, w = torch.randn(4, 8), torch.randn(8, 8)
        torch._dynamo.reset()
        with fresh_inductor_cache(), inductor_config.patch(kernel_annotations=True):
            compiled = torch.compile(f, backend="inductor")
            compiled(x, w)
            with torch.profiler.profile() as prof:
                compiled(x, w)
        torch._dynamo.reset()
        events = [e.name for e in prof.events() if e.name.startswith("annotation")]
        # the extern mm and the fused relu/add kernel
        self.assertEqual(events, [SCOPE, SCOPE])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path, encoding="utf-8") as trace:
                names = [e.get("name") for e in json.load(trace)["traceEvents"]]
        self.assertEqual([n for n in names if n in (SCOPE, "unknown")], [SCOPE, SCOPE])

    def test_keys_and_values_are_written_alike(self):
        from torch._inductor.kernel_annotations import scope_label

        self.assertEqual(scope_label(REGION), SCOPE[len("annotation ") :])
        self.assertEqual(scope_label({"k": "\u00e9\U0001f600"}), "k='/u00e9/ud83d/ude00'")
        self.assertEqual(scope_label({"\u00e9\U0001f600": 1}), "/u00e9/ud83d/ude00=1")


if __name__ == "__main__":
    run_tests()
