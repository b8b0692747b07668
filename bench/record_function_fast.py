"""record_function against torch._C._profiler._RecordFunctionFast for the per-kernel scopes of
torch._inductor.config.kernel_annotations: what one enter and exit costs with no profiler listening, and what a
profiler records of each (key_averages() rows, the Chrome trace's events: name, category, args).

usage: .venv/bin/python bench/record_function_fast.py [--calls N] [--rounds N]
The two sides take turns, one thread, N enters and exits per round; medians of the rounds, per call.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

NAME = "annotation layer=3, stage='attn' (backward)"
KERNEL = "cpp_fused_relu_0"


def slow(n):
    for _ in range(n):
        with record_function(NAME, KERNEL):
            pass


def fast(n):
    rf = torch._C._profiler._RecordFunctionFast
    for _ in range(n):
        with rf(NAME, [KERNEL]):
            pass


def loop(n):
    for _ in range(n):
        pass


def timed(fn, n):
    start = time.perf_counter()
    fn(n)
    return time.perf_counter() - start


def profiled(fn, record_shapes):
    """What a CPU profiler records of one scope around one op."""
    x = torch.ones(4)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
        if fn is slow:
            with record_function(NAME, KERNEL):
                x.relu()
        else:
            with torch._C._profiler._RecordFunctionFast(NAME, [KERNEL]):
                x.relu()
    rows = sorted((e.key, e.count) for e in prof.key_averages() if "annotation" in e.key)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    scope = [e for e in events if e.get("name") == NAME]
    relu = [e for e in events if e.get("name") == "aten::relu"]
    inside = bool(scope and relu) and (
        scope[0]["ts"] <= relu[0]["ts"] and relu[0]["ts"] + relu[0]["dur"] <= scope[0]["ts"] + scope[0]["dur"]
    )
    return rows, [(e.get("cat"), e.get("args", {})) for e in scope], inside


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}")
    sides = {"record_function": slow, "_RecordFunctionFast": fast, "empty loop": loop}
    times = {name: [] for name in sides}
    for fn in sides.values():
        fn(1000)  # warm-up
    for i in range(a.rounds):
        order = list(sides)
        for name in order[i % 3:] + order[:i % 3]:
            times[name].append(timed(sides[name], a.calls))
    base = statistics.median(times["empty loop"])
    print(f"no profiler, {a.calls} enters and exits, median of {a.rounds} rounds (loop overhead removed):")
    for name in ("record_function", "_RecordFunctionFast"):
        med = statistics.median(times[name])
        print(f"  {name:<20} {(med - base) / a.calls * 1e6:7.3f} us per call")
    ratio = (statistics.median(times["record_function"]) - base) / (statistics.median(times["_RecordFunctionFast"]) - base)
    print(f"  record_function / _RecordFunctionFast: {ratio:.1f}x")
    for record_shapes in (False, True):
        print(f"with a CPU profiler, record_shapes={record_shapes}:")
        for name, fn in (("record_function", slow), ("_RecordFunctionFast", fast)):
            rows, scope, inside = profiled(fn, record_shapes)
            print(f"  {name:<20} key_averages: {rows}")
            print(f"  {'':<20} trace events (cat, args): {scope}; aten::relu inside: {inside}")


if __name__ == "__main__":
    main()
