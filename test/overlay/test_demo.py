"""``torch-overlay demo``: the README's first command ends with this table."""
from __future__ import annotations

import subprocess

from scratch_torch import VENV, ScratchTorch


def demo_rows(stdout: str) -> dict[str, list[list[str]]]:
    """{"forward"/"backward": rows split on "|"} of the demo's two tables."""
    tables, current = {"forward": [], "backward": []}, None
    for line in stdout.splitlines():
        if "forward graph" in line:
            current = "forward"
        elif line == "backward graph":
            current = "backward"
        elif current and line and not line.startswith("SeqNr|"):
            tables[current].append(line.split("|"))
    return tables


def test_demo_shows_regions_in_every_flex_attention_subgraph():
    out = subprocess.run([str(VENV / "bin" / "torch-overlay"), "demo"], capture_output=True, text=True, check=True).stdout
    tables = demo_rows(out)
    attention, head = "{'region': 'attention'}", "{'region': 'head'}"

    (flex,) = [r for r in tables["forward"] if r[1] == "flex_attention"]
    assert (flex[4], flex[5]) == (attention, "")
    for sub in ("sdpa_score0.", "sdpa_mask0."):
        assert [r[4] for r in tables["forward"] if r[0].startswith(sub)] != []
        assert {r[4] for r in tables["forward"] if r[0].startswith(sub)} == {attention}
    assert all(r[5] == "" for r in tables["forward"]), "no forward op carries autograd_backward"

    (flex_bw,) = [r for r in tables["backward"] if r[1] == "flex_attention_backward"]
    assert (flex_bw[3], flex_bw[4], flex_bw[5]) == ("flex_attention", attention, "True")
    for sub in ("fw_graph.", "joint_graph.", "mask_graph."):
        rows = [r for r in tables["backward"] if r[0].startswith(sub)]
        assert rows and {r[4] for r in rows} == {attention}, sub
    assert {r[4] for r in tables["backward"] if r[1] == "aten.threshold_backward.default"} == {head}


def test_demo_on_vanilla_torch_says_the_overlay_is_missing(tmp_path):
    vanilla = ScratchTorch(tmp_path)
    proc = vanilla.run("demo", check=True)
    assert "has no torch.fx.traceback.annotate: the overlay is not applied" in proc.stdout
