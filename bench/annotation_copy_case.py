"""One case of bench_annotation_copy.py, run in a fresh interpreter (patched 2.5.1
or upstream 2.13): trace a chain of ops inside annotate(<case's annotation>) and
print the trace's wall time or its peak Python allocation (tracemalloc) as JSON.

usage: python annotation_copy_case.py CASE {time|memory}
"""
import json
import sys
import time
import tracemalloc

import torch
import torch.fx.traceback as fx_traceback
from functorch.compile import aot_function, make_boxed_func
from torch.fx.experimental.proxy_tensor import make_fx

OPS = 100


def annotation(case):
    if case.startswith("big-list"):
        return {"tags": list(range(1_000_000))}
    if case.startswith("many-list-keys"):
        return {f"k{i}": [i] for i in range(10_000)}
    if case.startswith("flat"):
        return {"region": "attention", "layer": 3, "bucket": 0}
    raise SystemExit(f"unknown case {case}")


def chain(x):
    for _ in range(OPS // 2):
        x = x.sin().cos()
    return x.sum()


def run(case, ann):
    def fn(x):
        with fx_traceback.annotate(ann):
            return chain(x)

    if case.endswith("make_fx"):
        with fx_traceback.preserve_node_meta():
            make_fx(fn)(torch.randn(8))
    else:  # joint graph: forward nodes, backward nodes and the fw->bw copy
        def compiler(gm, example_inputs):
            return make_boxed_func(gm.forward)
        aot_function(fn, fw_compiler=compiler, bw_compiler=compiler)(torch.randn(8, requires_grad=True)).backward()


def main():
    case, what = sys.argv[1], sys.argv[2]
    ann = annotation(case)
    run("flat/make_fx", {"warm": 1})  # first-trace costs (imports, caches) outside the measurement
    if what == "time":
        start = time.perf_counter()
        run(case, ann)
        print(json.dumps({"value": time.perf_counter() - start}))
    else:
        tracemalloc.start()
        run(case, ann)
        print(json.dumps({"value": tracemalloc.get_traced_memory()[1]}))


if __name__ == "__main__":
    main()
