"""The private fx.traceback helpers the overlay backports, exercised the same
way under any torch: prints what each returns or leaves in the tracing state,
as JSON on the last line. Runs unchanged under patched 2.5.1 and upstream."""
import json

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

out = {"torch": torch.__version__}
meta = fx_traceback.current_meta


def state(key):
    return fx_traceback.get_current_meta().get(key, "<absent>")


with fx_traceback.preserve_node_meta():
    with fx_traceback._set_autograd_backward():
        inside = state("autograd_backward")
        with fx_traceback._set_autograd_backward(False):
            nested_false = state("autograd_backward")
        after_nested = state("autograd_backward")
    after = state("autograd_backward")
out["set_autograd_backward"] = [inside, nested_false, after_nested, after]

fx_traceback._mark_autograd_backward()  # outside preserve_node_meta
marked = state("autograd_backward")
fx_traceback._reset_autograd_backward()
out["mark_outside_preserve"] = [marked, state("autograd_backward")]

with fx_traceback._preserve_node_seq_nr(preserve_seq_nr=True):
    on = fx_traceback._is_preserving_node_seq_nr()
    with fx_traceback._preserve_node_seq_nr(preserve_seq_nr=False):
        off = fx_traceback._is_preserving_node_seq_nr()
out["preserve_node_seq_nr"] = [on, off, fx_traceback._is_preserving_node_seq_nr()]

with fx_traceback.annotate([("a", 1), ("b", 2)]):
    out["annotate_pairs"] = state("custom")
out["after_annotate"] = state("custom")


def f(x):
    with fx_traceback.annotate({"pp_stage": 0}):
        with fx_traceback.annotate({"fsdp_bucket": 0}):
            x = x + 1
        x = x - 2
    return x * 3


with fx_traceback.preserve_node_meta():
    gm = make_fx(f)(torch.randn(3))
out["get_custom_metadata"] = fx_traceback._get_custom_metadata(gm)
out["seq_nr_groups_forward_only"] = fx_traceback._get_ordered_seq_nr_groups(gm)
out["replay_node_default"] = fx_traceback.get_current_replay_node()
print(json.dumps(out))
