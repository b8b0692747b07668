"""``torch-overlay demo``: the README's first command ends with this table."""
from __future__ import annotations

import subprocess

from torch_overlay.series import release_key
from scratch_torch import TORCH_RELEASE, VENV, ScratchTorch

FLEX_LEFT_OUT = "flex_attention left out: torch "


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


def run_demo() -> str:
    return subprocess.run([str(VENV / "bin" / "torch-overlay"), "demo"], capture_output=True, text=True,
                          check=True).stdout


def test_demo_shows_regions_in_every_flex_attention_subgraph():
    out = run_demo()
    tables = demo_rows(out)
    attention, head = "{'region': 'attention'}", "{'region': 'head'}"
    if FLEX_LEFT_OUT in out:
        # torch >= 2.11 refuses flex_attention backward on CPU: the demo says so and shows plain matmuls.
        assert release_key(TORCH_RELEASE) >= (2, 11) and out.startswith(FLEX_LEFT_OUT), out[:300]
        for kind in ("forward", "backward"):
            assert {r[4] for r in tables[kind] if r[1] == "aten.bmm.default"} == {attention}, kind
        assert {r[4] for r in tables["backward"] if r[1] == "aten.threshold_backward.default"} == {head}
        return

    (flex,) = [r for r in tables["forward"] if r[1] == "flex_attention"]
    assert (flex[4], flex[5]) == (attention, "")
    for sub in ("sdpa_score0.", "sdpa_mask0."):
        assert [r[4] for r in tables["forward"] if r[0].startswith(sub)] != []
        assert {r[4] for r in tables["forward"] if r[0].startswith(sub)} == {attention}
    assert all(r[5] == "" for r in tables["forward"]), "no forward op carries autograd_backward"

    # 2.10 also gives the nodes inside the HOP's subgraphs original_aten = the HOP, and numbers
    # the backward subgraphs (fw_graph0.): the root row is the one without a subgraph prefix.
    (flex_bw,) = [r for r in tables["backward"] if r[1] == "flex_attention_backward" and "." not in r[0]]
    assert (flex_bw[3], flex_bw[4], flex_bw[5]) == ("flex_attention", attention, "True")
    for sub in ("fw_graph", "joint_graph", "mask_graph"):
        # 2.6 numbers the subgraphs (fw_graph0; 2.5.1: fw_graph); from 2.8 this score_mod's joint graph holds no op
        rows = [r for r in tables["backward"] if r[0].split(".")[0].rstrip("0123456789") == sub]
        if sub == "joint_graph" and not rows and release_key(TORCH_RELEASE) >= (2, 8):
            continue
        assert rows and {r[4] for r in rows} == {attention}, sub
    assert {r[4] for r in tables["backward"] if r[1] == "aten.threshold_backward.default"} == {head}


def test_demo_on_vanilla_torch(tmp_path):
    vanilla = ScratchTorch(tmp_path)
    proc = vanilla.run("demo", check=True)
    if release_key(TORCH_RELEASE) < (2, 10):  # annotate is upstream from 2.10 on
        assert "has no torch.fx.traceback.annotate: the overlay is not applied" in proc.stdout
    else:  # upstream's own annotations, as the release ships them
        assert demo_rows(proc.stdout)["backward"], proc.stdout
