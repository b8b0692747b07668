"""Time TracerBase.create_node in this interpreter (patched or vanilla 2.5.1, or
upstream) under a given tracing state; prints µs per node as JSON.

usage: python create_node_case.py STATE   (STATE: bare, flat, nested, backward)
"""
import json
import sys
import time

import torch
import torch.fx
import torch.fx.traceback as fx_traceback

N = 20000
STATES = {
    "bare": {},
    "flat": {"custom": {"region": "attention", "layer": 3}},
    "nested": {"custom": {"region": "attention", "cfg": {"bucket": [0, 1]}, "tags": ["a", "b"]}},
    "backward": {"custom": {"region": "attention"}, "stack_trace": "File x.py, line 1\n" * 20,
                 "in_grad_fn": 1, "grad_fn_seq_nr": [7], "autograd_backward": True},
}


def main():
    state = STATES[sys.argv[1]]
    tracer = torch.fx.Tracer()
    tracer.graph = torch.fx.Graph()
    target = torch.ops.aten.sin.default
    best = float("inf")
    with fx_traceback.preserve_node_meta():
        fx_traceback.get_current_meta().update(state)
        for _ in range(5):
            tracer.graph = torch.fx.Graph()
            start = time.perf_counter()
            for _ in range(N):
                tracer.create_node("call_function", target, (), {})
            best = min(best, (time.perf_counter() - start) / N * 1e6)
    print(json.dumps({"us_per_node": best}))


if __name__ == "__main__":
    main()
