"""rebuild-wheel under faults: kill -9 at each of its failpoints, SIGTERM, and damaged input wheels.

A small torch 2.5.1 wheel made of the real wheel's own members keeps every run to a second; the
full-size wheel is covered by test_rebuild_wheel.py.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fault_checks import damage_member, small_release_wheel_of
from scratch_torch import torch_wheel


@pytest.fixture(scope="module")
def small_release_wheel(tmp_path_factory) -> Path:
    real = torch_wheel()
    return small_release_wheel_of(real, tmp_path_factory.mktemp("small-wheel") / real.name)


def rebuild(wheel: Path, out: Path, env=None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "torch_overlay", "rebuild-wheel", str(wheel), "-o", str(out)],
                          capture_output=True, text=True, env=full_env)


@pytest.mark.parametrize("point", ["rebuild-wheel-copied", "rebuild-wheel-written"])
def test_kill_9_during_rebuild_wheel_then_the_next_run_removes_the_partial_wheel(small_release_wheel, tmp_path,
                                                                                  point):
    out = tmp_path / "out"
    assert rebuild(small_release_wheel, out, {"TORCH_OVERLAY_FAILPOINT": point}).returncode == -signal.SIGKILL
    (partial,) = out.iterdir()
    assert partial.name.startswith(".torch-2.5.1+") and partial.name.endswith(".part")
    proc = rebuild(small_release_wheel, out)
    assert proc.returncode == 0, proc.stderr
    assert f"removed {partial.name}" in proc.stderr
    assert [p.name for p in out.iterdir()] == [Path(proc.stdout.strip()).name]
    with zipfile.ZipFile(proc.stdout.strip()) as zf:
        assert zf.testzip() is None


def test_sigterm_during_rebuild_wheel_leaves_nothing(small_release_wheel, tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    env["TORCH_OVERLAY_FAILPOINT"] = "rebuild-wheel-copied:sleep"
    proc = subprocess.Popen([sys.executable, "-m", "torch_overlay", "rebuild-wheel", str(small_release_wheel),
                             "-o", str(out)], stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stderr:
            if "failpoint rebuild-wheel-copied reached" in line:
                break
        assert len(list(out.iterdir())) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert list(out.iterdir()) == []


def _rewritten(wheel: Path, dest: Path, change) -> Path:
    """A copy of ``wheel`` whose members pass through ``change(name, data) -> (name, data)``."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            name, data = change(info.filename, src.read(info))
            out.writestr(name, data)
    return dest


def assert_refused(proc: subprocess.CompletedProcess, out: Path, *phrases: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "\nerror: " in "\n" + proc.stderr and "Traceback" not in proc.stderr, proc.stderr  # after progress lines
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_damaged_member_that_is_copied_through_is_refused(small_release_wheel, tmp_path):
    wheel = damage_member(small_release_wheel, tmp_path / small_release_wheel.name, "torch/version.py")
    assert_refused(rebuild(wheel, tmp_path / "out"), tmp_path / "out",
                   f"torch/version.py in {wheel.name} is damaged", "unchanged: no wheel was written",
                   "download the release wheel again")


def test_member_that_differs_from_the_wheels_record_is_refused(small_release_wheel, tmp_path):
    def change(name, data):
        return name, (data + b"# not the release's bytes\n" if name == "torch/version.py" else data)

    wheel = _rewritten(small_release_wheel, tmp_path / small_release_wheel.name, change)
    assert_refused(rebuild(wheel, tmp_path / "out"), tmp_path / "out",
                   "torch/version.py", "its sha256 or size differs from the wheel's RECORD")


def test_damaged_target_member_is_refused(small_release_wheel, tmp_path):
    wheel = damage_member(small_release_wheel, tmp_path / small_release_wheel.name, "torch/fx/traceback.py")
    assert_refused(rebuild(wheel, tmp_path / "out"), tmp_path / "out",
                   f"torch/fx/traceback.py in {wheel.name} cannot be read", "the wheel is damaged")


@pytest.mark.parametrize("member", ["RECORD", "METADATA"])
def test_damaged_dist_info_member_is_refused(small_release_wheel, tmp_path, member):
    """Found by bench/fault_campaign.py: a damaged RECORD gave a zlib traceback."""
    with zipfile.ZipFile(small_release_wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(f".dist-info/{member}"))
    wheel = damage_member(small_release_wheel, tmp_path / small_release_wheel.name, name)
    assert_refused(rebuild(wheel, tmp_path / "out"), tmp_path / "out", f"{name} in {wheel.name} cannot be read",
                   "the wheel is damaged")


def test_wheel_of_a_release_without_a_series_is_not_told_to_install_another(small_release_wheel, tmp_path):
    def change(name, data):
        name = name.replace("torch-2.5.1.dist-info", "torch-2.4.0.dist-info")
        return name, (data.replace(b"\nVersion: 2.5.1\n", b"\nVersion: 2.4.0\n") if name.endswith("METADATA")
                      else data)

    wheel = _rewritten(small_release_wheel, tmp_path / small_release_wheel.name.replace("2.5.1", "2.4.0"), change)
    proc = rebuild(wheel, tmp_path / "out")
    assert_refused(proc, tmp_path / "out", "no patch series for torch 2.4.0",
                   "pass the wheel of a release that has a series")
    assert "pip install" not in proc.stderr
