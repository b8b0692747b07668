"""One side of bench_caller_annotation.py, in this interpreter (vanilla or patched torch, or
upstream); prints JSON.

usage: python caller_annotation_case.py overhead|guards|compiles
overhead: two compiled one-op functions, one compiled with
torch._dynamo.config.trace_under_caller_annotation off, one with it on (a torch without the
flag compiles both alike), timed alternately in this process: µs per call (backend "eager":
a call is Dynamo's cache lookup and guards plus one add; best of 21 x 5,000 calls), outside
any annotation and, for the flag-on one where torch has annotate, inside one; and µs per
evaluation of the frame's guards alone (the cache entry's guard manager, best of 21 x 50,000).
guards: the names of the guards Dynamo installs for one of them, flag off and flag on.
compiles: how many graphs one frame compiles when called under 12 different annotations, and
under 3 annotations holding a fresh object each, flag off and on.
"""
import json
import time

import torch
import torch._dynamo
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

CALLS = 5000
REPEATS = 21


def tiny_off(x):
    return x + 1


def tiny_on(x):
    return x + 1


def compiled_with_flag(fn, flag, backend="eager", **kwargs):
    """``fn`` compiled (first call made) with the flag set to ``flag`` where torch has it."""
    has_flag = hasattr(torch._dynamo.config, "trace_under_caller_annotation")
    compiled = torch._dynamo.optimize(backend, **kwargs)(fn)
    with torch._dynamo.config.patch(**({"trace_under_caller_annotation": flag} if has_flag else {})):
        compiled(torch.ones(2))
    return compiled


def best_us(fn, x):
    start = time.perf_counter()
    for _ in range(CALLS):
        fn(x)
    return (time.perf_counter() - start) / CALLS * 1e6


def guard_check(fn):
    """The guard check of the first graph compiled for ``fn`` (outside any annotation)."""
    entry = _debug_get_cache_entry_list(fn.__code__)[-1]  # the list starts with the newest
    manager = getattr(entry, "guard_manager", None) or entry.check_fn  # check_fn: 2.5.1
    return manager.check


def guard_us(check, f_locals):
    start = time.perf_counter()
    for _ in range(CALLS * 10):
        check(f_locals)
    return (time.perf_counter() - start) / (CALLS * 10) * 1e6


def overhead():
    torch._dynamo.reset()
    sides = {"off": compiled_with_flag(tiny_off, False), "on": compiled_with_flag(tiny_on, True)}
    annotate = getattr(torch.fx.traceback, "annotate", None)
    if annotate is not None:
        with annotate({"region": 0}):
            sides["on"](torch.ones(2))  # compiles the graph for this annotation
    x = torch.ones(2)
    calls = {"off": float("inf"), "on": float("inf"), "on inside annotate": float("inf")}
    checks = {"off": guard_check(tiny_off), "on": guard_check(tiny_on)}
    guards = {"off": float("inf"), "on": float("inf")}
    for _ in range(REPEATS):
        calls["off"] = min(calls["off"], best_us(sides["off"], x))
        calls["on"] = min(calls["on"], best_us(sides["on"], x))
        if annotate is not None:
            with annotate({"region": 0}):
                calls["on inside annotate"] = min(calls["on inside annotate"], best_us(sides["on"], x))
        for side, check in checks.items():
            guards[side] = min(guards[side], guard_us(check, {"x": x}))
    return {"call": {k: v for k, v in calls.items() if v != float("inf")}, "guard_check": guards}


def guards():
    out = {}
    for flag, fn in ((False, tiny_off), (True, tiny_on)):
        torch._dynamo.reset()
        names = set()
        compiled_with_flag(fn, flag, guard_export_fn=lambda gs: names.update(g.inner_create_fn().__name__ for g in gs))
        out["on" if flag else "off"] = sorted(names)
    return out


def compiles():
    annotate = torch.fx.traceback.annotate
    out = {}
    for flag in (False, True):
        for name, annotations in (("12 annotations", [{"i": i} for i in range(12)]),
                                  ("fresh object", [{"obj": object()} for _ in range(3)])):
            torch._dynamo.reset()
            graphs = []

            def backend(gm, example_inputs):
                graphs.append(gm)
                return gm.forward

            compiled = torch._dynamo.optimize(backend)(tiny_on)
            has_flag = hasattr(torch._dynamo.config, "trace_under_caller_annotation")
            with torch._dynamo.config.patch(**({"trace_under_caller_annotation": flag} if has_flag else {})):
                for annotation in annotations:
                    with annotate(annotation):
                        compiled(torch.ones(2))
            out[f"{name}, flag {'on' if flag else 'off'}"] = len(graphs)
    return out


if __name__ == "__main__":
    import sys

    what = sys.argv[1]
    print(json.dumps({"torch": torch.__version__, what: {"overhead": overhead, "guards": guards, "compiles": compiles}[what]()}))
