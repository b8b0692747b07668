"""The kernel calls and extern calls of Inductor's wrapper code, each with the ``# Annotation:`` comment that
``torch._inductor.config.kernel_annotations`` writes above it: one reader for the benches that count them
(postgrad_coverage.py on CPU, gpu_kernel_annotations.py on a GPU)."""
from __future__ import annotations

import re
from collections.abc import Iterator

# a call in the wrapper's call(): `triton_poi_fused_0.run(...)`, `cpp_fused_x_0(...)`, `extern_kernels.mm(...)`,
# `buf3 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(...)`, `aten.sort.default(...)`
_CALL = re.compile(r"^\s*(?:[\w, ]+= )?(?P<kernel>triton_\w+\.run|cpp_fused_\w+|extern_kernels\.\w+"
                   r"|(?:torch\.ops\.)?aten\.\w+\.\w+)\(")
# the line a Triton call has between its comments and itself
_STREAM = re.compile(r"^\s*stream\d+ = get_raw_stream\(")
_ANNOTATION = re.compile(r"^\s*# Annotation: (?P<json>.*)$")


def wrapper_calls(codes: list[str]) -> Iterator[tuple[str, str | None]]:
    """(the called kernel, the JSON of the ``# Annotation:`` comment above the call or None) for each call."""
    for code in codes:
        lines = code.splitlines()
        for i, line in enumerate(lines):
            match = _CALL.match(line)
            if not match or line.lstrip().startswith("def ") or " = async_compile" in line:
                continue
            comment = None
            j = i - 1
            while j >= 0 and (lines[j].lstrip().startswith("#") or _STREAM.match(lines[j])):
                found = _ANNOTATION.match(lines[j])
                if found:
                    comment = found["json"]
                    break
                j -= 1
            yield match["kernel"], comment
