"""torch._inductor.config.kernel_annotations and annotations beyond ASCII
(local-inductor-kernel-annotations, beyond upstream).

A scope's name keeps characters beyond ASCII as they are, in keys and values
alike, so profiler events and tables show the region as the user wrote it;
the output code writes the name with ``ascii()`` and stays ASCII. (The Chrome
trace writer of 2.8.0, 2.9.1 and 2.13.0, not 2.5.1, writes such an event's
name as "unknown": torch's behaviour, not checked here.)"""
import torch
import torch._dynamo
import torch.fx.traceback as fx_traceback
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.testing._internal.common_utils import TestCase, run_tests

# {"région": "café"} and its scope
REGION = {"r\u00e9gion": "caf\u00e9"}
SCOPE = "annotation r\u00e9gion='caf\u00e9'"


def f(x, w):
    with fx_traceback.annotate(REGION):
        return torch.relu(x @ w) + 1


class TestKernelAnnotationNonAscii(TestCase):
    def test_scope_names_keep_characters_beyond_ascii(self):
        x, w = torch.randn(4, 8), torch.randn(8, 8)
        torch._dynamo.reset()
        with fresh_inductor_cache(), inductor_config.patch(kernel_annotations=True):
            compiled = torch.compile(f, backend="inductor")
            _, (code,) = run_and_get_code(compiled, x, w)
            with torch.profiler.profile() as prof:
                compiled(x, w)
        torch._dynamo.reset()
        events = [e.name for e in prof.events() if e.name.startswith("annotation")]
        # the extern mm and the fused relu/add kernel
        self.assertEqual(events, [SCOPE, SCOPE])
        self.assertTrue(code.isascii())
        self.assertEqual(code.count(f"record_function({ascii(SCOPE)}, "), 2)

    def test_keys_and_values_are_written_alike(self):
        from torch._inductor.kernel_annotations import scope_label

        self.assertEqual(scope_label(REGION), SCOPE[len("annotation ") :])
        emoji = "\u00e9\U0001f600"
        self.assertEqual(scope_label({"k": emoji}), f"k='{emoji}'")
        self.assertEqual(scope_label({emoji: [emoji]}), f"{emoji}=['{emoji}']")


if __name__ == "__main__":
    run_tests()
