"""Two ranks, installed the way a cluster installs it: the rebuilt wheel pip-installed into a
fresh venv (test_rebuild_wheel's ``installed`` fixture), then ``torchrun --nproc_per_node 2``
(gloo, CPU) running ``torch-overlay report`` on a user's training script that compiles a small
annotated model wrapped in DDP and then in FSDP1 (two_rank_script.py).

Every rank's forward and backward graphs carry the regions on every op, each rank writes its
own report page, and the annotated runs' losses equal the unannotated runs' exactly.
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from test_rebuild_wheel import installed, rebuilt, release_wheel  # noqa: F401  (the fixtures, reused)

SCRIPT = Path(__file__).resolve().parent / "two_rank_script.py"
STEPS = 2
# Per region: (forward ops, backward ops, % backward annotated, gradient-accumulation ops).
COVERAGE_ROW = re.compile(r'<tr class="coverage-row[^"]*" data-region="([^"]*)">'
                          r'<td class="mono">[^<]*</td>' + r'<td class="num">([^<]*)</td>' * 4
                          + r'<td class="consumers">[^<]*</td></tr>')


def gloo_problem(python: Path) -> str | None:
    """Why a one-rank gloo process group cannot start here, or None."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    probe = ("import torch.distributed as d; d.init_process_group('gloo', init_method='tcp://127.0.0.1:%d', "
             "rank=0, world_size=1); d.barrier(); d.destroy_process_group()" % port)
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    return None if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def two_ranks(installed, tmp_path_factory):  # noqa: F811
    problem = gloo_problem(installed.python)
    if problem:
        pytest.skip(f"gloo cannot start a process group on this machine: {problem}")
    cwd = tmp_path_factory.mktemp("two_ranks")
    torchrun = installed.python.parent / "torchrun"
    proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "-m", "torch_overlay", "report",
                           str(SCRIPT), str(STEPS), "-o", "report.html"],
                          capture_output=True, text=True, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc, cwd


def test_runs_on_the_installed_wheel(two_ranks, installed):  # noqa: F811
    proc, _ = two_ranks
    for rank in (0, 1):
        assert re.search(rf"report \[rank {rank}/2\]: wrote report\.rank{rank}\.html", proc.stdout + proc.stderr)
    # Every rank imported the pip-installed torch, not the repository's .venv.
    probe = subprocess.run([str(installed.python), "-c", "import torch; print(torch.__file__)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == str(installed.site / "torch" / "__init__.py")


def test_every_rank_annotates_every_op_of_the_annotated_runs(two_ranks):
    proc, _ = two_ranks
    for rank in (0, 1):
        lines = re.findall(rf"report \[rank {rank}/2\]: captured (\w+) graph \d+ \(compilation (\d+)\): "
                           r"(\d+) ops, (\d+) annotated", proc.stderr)
        # Compilations 1 (DDP) and 3 (FSDP1) are the annotated runs, 2 and 4 the plain ones.
        kinds = [(kind, int(c)) for kind, c, _, _ in lines]
        assert kinds == [(k, c) for c in (1, 2, 3, 4) for k in ("dynamo", "forward", "backward")], lines
        for kind, c, ops, annotated in lines:
            expected = int(ops) if int(c) in (1, 3) else 0
            assert int(ops) > 0 and int(annotated) == expected, (rank, kind, c, ops, annotated)


def test_every_rank_writes_its_page_with_both_regions(two_ranks):
    _, cwd = two_ranks
    assert sorted(p.name for p in cwd.glob("report*.html")) == ["report.rank0.html", "report.rank1.html"]
    pages = [dict((m[0], m[1:]) for m in COVERAGE_ROW.findall((cwd / f"report.rank{r}.html").read_text(encoding="utf-8")))
             for r in (0, 1)]
    for page in pages:
        for region in ("{&#x27;region&#x27;: &#x27;encoder&#x27;}", "{&#x27;region&#x27;: &#x27;head&#x27;}"):
            forward_ops, backward_ops, percent, _ = page[region]
            assert int(forward_ops) > 0 and int(backward_ops) > 0 and percent == "100%", (region, page[region])
    assert pages[0] == pages[1]


def test_losses_match_the_unannotated_runs(two_ranks):
    _, cwd = two_ranks
    results = [json.loads((cwd / f"losses.rank{rank}.json").read_text(encoding="utf-8")) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        for kind in ("ddp", "fsdp"):
            assert len(r[kind]["annotated"]) == STEPS
            assert r[kind]["annotated"] == r[kind]["plain"], (r["rank"], kind)
