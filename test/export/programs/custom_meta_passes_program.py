"""node.meta["custom"] through export's passes, printed as JSON; runs unchanged on the
patched 2.5.1 and on upstream torch (test_export_custom_meta_passes.py compares them)."""
import json

import torch
import torch.fx.traceback as fx_traceback


class AddMul(torch.nn.Module):
    def forward(self, x):
        with fx_traceback.annotate({"pp_stage": 0}):
            x = x + 1
        return x * 2


class WithState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("buf", torch.ones(3))
        self.const = torch.ones(3)

    def forward(self, x):
        return self.lin(x) + self.buf + self.const


with fx_traceback.preserve_node_meta():
    ep = torch.export.export(AddMul(), (torch.randn(3),), strict=True)
out = {"preserve_node_meta": [(str(n.target), n.meta.get("custom")) for n in ep.graph.nodes
                              if n.op == "call_function"],
       "decomposed": {}, "reexport_params": {}}
for mode, strict in (("strict", True), ("non_strict", False)):
    ep = torch.export.export(WithState(), (torch.randn(2, 3),), strict=strict)
    for node in ep.graph.nodes:
        node.meta["custom"] = {"name": node.name}
    out["decomposed"][mode] = {n.name: n.meta.get("custom") for n in ep.run_decompositions().graph.nodes
                               if n.op in ("placeholder", "output")}
    ep = torch.export.export(WithState(), (torch.randn(2, 3),), strict=strict)
    for node in ep.graph.nodes:
        if node.target == torch.ops.aten.linear.default:
            node.meta["custom"] = {"quantization_tag": "foo"}
    again = torch.export.export(ep.module(), (torch.randn(2, 3),), strict=strict)
    out["reexport_params"][mode] = {n.name: n.meta.get("custom") for n in again.graph.nodes
                                    if n.op == "placeholder" and n.name.startswith(("p_", "b_"))}
print(json.dumps(out, sort_keys=True))
