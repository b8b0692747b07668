"""torch._inductor.config.kernel_annotations and the compile caches
(local-inductor-kernel-annotations, beyond upstream).

With the flag on, the annotation is written into the output code (the
``# Annotation:`` comments and the ``record_function`` scope names), so the FX
graph cache and the AOTAutograd cache must key it: the layers of a model
compiled block by block are the same graph under another annotation, and a
layer must not run in the scopes of the layer compiled before it. With the
flag off the annotation changes nothing Inductor writes and the keys are the
release's: a layer finds the entry another layer made."""
import torch
import torch._dynamo
import torch.fx
import torch.fx.traceback as fx_traceback
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.utils import fresh_inductor_cache, run_and_get_code
from torch.testing._internal.common_utils import TestCase, run_tests


LINEAR = torch.nn.Linear(8, 8)


def layer(index, body="functions"):
    """Layer ``index`` of a stack of identical layers: the same code and graph
    for every index, only the annotation differs. ``body`` says what the layer
    calls, and so which nodes of Dynamo's graph carry the annotation:
    functions (call_function), tensor methods (call_method) or a module
    (call_module where Dynamo does not inline it)."""

    def f(x, w):
        with fx_traceback.annotate({"layer": index}):
            if body == "methods":
                return x.mm(w).relu().add(1)
            if body == "module":
                return LINEAR(x)
            return torch.relu(x @ w) + 1

    return f


def scopes(prof):
    """The distinct annotation scopes of a profile, sorted."""
    return sorted({e.name for e in prof.events() if e.name.startswith("annotation ")})


def compile_layers(indices, *, train, autograd_cache, flag=True, body="functions"):
    """Compile and run the layers ``indices`` in turn, in one process, with the
    caches of a fresh cache folder. For each: the cache counters, the
    annotation comments of its output code and the annotation scopes a
    profiled run of it records."""
    x = torch.randn(4, 8, requires_grad=train)
    w = torch.randn(8, 8, requires_grad=train)
    seen = []
    with (
        fresh_inductor_cache(),
        inductor_config.patch(fx_graph_cache=True, kernel_annotations=flag),
        functorch_config.patch(enable_autograd_cache=autograd_cache),
    ):
        for index in indices:
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(layer(index, body), backend="inductor")

            def step():
                out = compiled(x, w)
                if train:
                    out.sum().backward()

            _, code = run_and_get_code(step)
            with torch.profiler.profile() as prof:
                step()
            seen.append(
                {
                    "fxgraph": (
                        counters["inductor"]["fxgraph_cache_miss"],
                        counters["inductor"]["fxgraph_cache_hit"],
                    ),
                    "autograd": (
                        counters["aot_autograd"]["autograd_cache_miss"],
                        counters["aot_autograd"]["autograd_cache_hit"],
                    ),
                    "comments": sorted(
                        {
                            line.strip()
                            for c in code
                            for line in c.splitlines()
                            if "# Annotation:" in line
                        }
                    ),
                    "scopes": scopes(prof),
                }
            )
    torch._dynamo.reset()
    return seen


class TestKernelAnnotationCache(TestCase):
    def test_fx_graph_cache_keys_the_annotation(self):
        # Layer 1 after layer 0: a miss, compiled with its own annotation; each
        # layer again: a hit, in its own scope.
        seen = compile_layers([0, 1, 1, 0], train=False, autograd_cache=False)
        self.assertEqual(
            [s["fxgraph"] for s in seen], [(1, 0), (1, 0), (0, 1), (0, 1)]
        )
        # the output code of a hit is the entry's
        self.assertEqual(
            [s["comments"] for s in seen],
            [[f'# Annotation: {{"layer": {i}}}'] for i in (0, 1, 1, 0)],
        )
        self.assertEqual(
            [s["scopes"] for s in seen],
            [
                ["annotation layer=0"],
                ["annotation layer=1"],
                ["annotation layer=1"],
                ["annotation layer=0"],
            ],
        )

    def test_autograd_cache_keys_the_annotation(self):
        # A training step: the AOTAutograd cache (off by default on some
        # releases) sits in front of the FX graph cache; forward and backward
        # of layer 1 run in layer 1's scopes.
        seen = compile_layers([0, 1, 1], train=True, autograd_cache=True)
        self.assertEqual([s["autograd"] for s in seen], [(1, 0), (1, 0), (0, 1)])
        expected = [
            [f"annotation layer={i}", f"annotation layer={i} (backward)"]
            for i in (0, 1, 1)
        ]
        self.assertEqual([s["scopes"] for s in seen], expected)

    def test_autograd_cache_keys_the_annotation_of_methods_and_modules(self):
        # The AOTAutograd cache hashes Dynamo's graph, where a tensor method is
        # a call_method node and a module a call_module node: their annotation
        # is keyed as a function's is.
        expected = [
            [f"annotation layer={i}", f"annotation layer={i} (backward)"]
            for i in (0, 1, 1)
        ]
        for body in ("methods", "module"):
            seen = compile_layers(
                [0, 1, 1], train=True, autograd_cache=True, body=body
            )
            self.assertEqual(
                [s["autograd"] for s in seen], [(1, 0), (1, 0), (0, 1)], body
            )
            self.assertEqual([s["scopes"] for s in seen], expected, body)

    def test_flag_off_layers_share_an_entry(self):
        # Off, the annotation changes nothing Inductor writes: layer 1 finds
        # layer 0's entries, as on the release.
        seen = compile_layers([0, 1], train=True, autograd_cache=True, flag=False)
        self.assertEqual([s["autograd"] for s in seen], [(1, 0), (0, 1)])
        seen = compile_layers([0, 1], train=False, autograd_cache=False, flag=False)
        self.assertEqual([s["fxgraph"] for s in seen], [(1, 0), (0, 1)])
        self.assertEqual([s["scopes"] for s in seen], [[], []])

    def test_cache_key_annotations(self):
        # What the keys hash: None with the flag off; with it on, a value that
        # tells apart what the output code would name differently (the
        # annotation of any call of the graph or of a subgraph, a backward
        # region) and nothing else, the same for the same graph traced again.
        from torch._inductor.kernel_annotations import cache_key_annotations

        def body(x):
            return torch.sin(x) * 2

        def traced(outer, inner, backward=False, placeholder=None):
            gm = torch.fx.symbolic_trace(body)
            sub = torch.fx.symbolic_trace(body)
            gm.add_submodule("sub", sub)
            for graph, custom in ((gm.graph, outer), (sub.graph, inner)):
                x, sin, mul, _ = graph.nodes
                x.meta["custom"] = placeholder
                sin.meta["custom"] = dict(custom)
                sin.meta["autograd_backward"] = backward
            return gm

        layer0 = {"layer": 0, "stage": "attn"}
        with inductor_config.patch(kernel_annotations=False):
            self.assertIsNone(cache_key_annotations(traced(layer0, layer0)))
        with inductor_config.patch(kernel_annotations=True):
            value = cache_key_annotations(traced(layer0, layer0))
            same = [
                traced(layer0, layer0),
                traced({"stage": "attn", "layer": 0}, layer0),  # key order
                traced(layer0, layer0, placeholder={"not": "a call"}),
            ]
            other = [
                traced({"layer": 1, "stage": "attn"}, layer0),
                traced(layer0, {"layer": 1, "stage": "attn"}),  # a subgraph
                traced(layer0, {}),
                traced(layer0, layer0, backward=True),
                # one JSON text, two scope names
                traced({True: 1}, layer0),
                traced({"true": 1}, layer0),
            ]
            self.assertIsNotNone(value)
            for gm in same:
                self.assertEqual(cache_key_annotations(gm), value)
            values = [cache_key_annotations(gm) for gm in other]
            self.assertEqual(len({value, *values}), len(other) + 1)

            # a call_method node (a tensor method, as Dynamo's graph has it)
            def methods(custom):
                gm = torch.fx.symbolic_trace(lambda x: x.sin())
                _, sin, _ = gm.graph.nodes
                self.assertEqual(sin.op, "call_method")
                sin.meta["custom"] = custom
                return cache_key_annotations(gm)

            self.assertNotEqual(methods({"layer": 0}), methods({"layer": 1}))


if __name__ == "__main__":
    run_tests()
