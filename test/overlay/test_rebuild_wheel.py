"""torch-overlay rebuild-wheel on the real torch 2.5.1 wheel, and that wheel installed by pip."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratch_torch import REPO, TORCH_RELEASE, VENV, site_packages, torch_wheel
from torch_overlay.build import build_patched
from torch_overlay.inplace import overlay_state
from torch_overlay.pristine import from_wheel
from torch_overlay.record import Record, record_hash
from torch_overlay.series import load_series

CHUNK = 4 << 20


def overlay_cli(*args, python=sys.executable, env=None, check=False) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    full_env.update(env or {})
    proc = subprocess.run([str(python), "-m", "torch_overlay", *args], capture_output=True, text=True, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def compressed_data(f, info: zipfile.ZipInfo):
    """The member's bytes as stored in the archive, in chunks."""
    f.seek(info.header_offset + 26)
    name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    f.seek(info.header_offset + 30 + name_len + extra_len)
    remaining = info.compress_size
    while remaining:
        chunk = f.read(min(CHUNK, remaining))
        assert chunk, f"{info.filename} is cut short"
        remaining -= len(chunk)
        yield chunk


def dist_info_of(zf: zipfile.ZipFile) -> str:
    (name,) = {n.split("/", 1)[0] for n in zf.namelist() if n.split("/", 1)[0].endswith(".dist-info")}
    return name


@pytest.fixture(scope="module")
def series():
    return load_series(TORCH_RELEASE)


@pytest.fixture(scope="module")
def release_wheel():
    return torch_wheel()


@dataclass
class Rebuilt:
    path: Path
    stderr: str


@pytest.fixture(scope="module")
def rebuilt(release_wheel, tmp_path_factory):
    out = tmp_path_factory.mktemp("rebuilt")
    proc = overlay_cli("rebuild-wheel", str(release_wheel), "-o", str(out), check=True)
    yield Rebuilt(Path(proc.stdout.strip()), proc.stderr)
    shutil.rmtree(out)


def test_name_version_and_dist_info_carry_the_series_label(rebuilt, release_wheel, series):
    version = f"{TORCH_RELEASE}+{series.label}"
    assert rebuilt.path.name == f"torch-{version}-cp311-cp311-manylinux1_x86_64.whl"
    assert sorted(p.name for p in rebuilt.path.parent.iterdir()) == [rebuilt.path.name]
    with zipfile.ZipFile(rebuilt.path) as new, zipfile.ZipFile(release_wheel) as old:
        assert {n.split("/", 1)[0] for n in new.namelist()} == {f"torch-{version}.dist-info", "torch", "torchgen",
                                                                "functorch"}
        old_metadata = old.read(f"torch-{TORCH_RELEASE}.dist-info/METADATA").decode()
        new_metadata = new.read(f"torch-{version}.dist-info/METADATA").decode()
        # Only the Version header changed.
        assert new_metadata == old_metadata.replace(f"\nVersion: {TORCH_RELEASE}\n", f"\nVersion: {version}\n", 1)
        assert new_metadata != old_metadata


def test_every_record_line_matches_its_member(rebuilt):
    """One pass over every member: ZipFile checks each CRC, we check each RECORD hash and size."""
    with zipfile.ZipFile(rebuilt.path) as zf:
        dist_info = dist_info_of(zf)
        rows = {row[0]: row[1:] for row in csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())) if row}
        files = [i for i in zf.infolist() if not i.is_dir()]
        assert set(rows) == {i.filename for i in files}
        assert rows.pop(f"{dist_info}/RECORD") == ["", ""]
        mismatched = []
        for info in files:
            if info.filename not in rows:
                continue
            digest, size = hashlib.sha256(), 0
            with zf.open(info) as member:  # raises BadZipFile on a CRC mismatch
                while chunk := member.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            algorithm, _, encoded = rows[info.filename][0].partition("=")
            recorded = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            if (algorithm, recorded, rows[info.filename][1]) != ("sha256", digest.digest(), str(size)):
                mismatched.append(info.filename)
        assert not mismatched


def test_patched_targets_are_what_build_patched_makes(rebuilt, release_wheel, series):
    read_release = from_wheel(release_wheel)
    expected = build_patched(series, read_release)
    with zipfile.ZipFile(rebuilt.path) as zf:
        for path, data in expected.items():
            assert zf.read(path) == data, path
            assert path in series.created or data != read_release(path), f"the series does not change {path}"


def test_wheel_holds_the_overlay_state_of_an_in_place_apply(rebuilt, release_wheel, series):
    read_release = from_wheel(release_wheel)
    patched = build_patched(series, read_release)
    pristine = {p: None if p in series.created else read_release(p) for p in patched}
    with zipfile.ZipFile(release_wheel) as old:
        record = Record.parse(old.read(f"torch-{TORCH_RELEASE}.dist-info/RECORD").decode())
    state_files = overlay_state(series, patched, pristine, record, forced=False)
    with zipfile.ZipFile(rebuilt.path) as zf:
        dist_info = dist_info_of(zf)
        applied = json.loads(zf.read(f"{dist_info}/overlay/applied.json"))
        assert applied["patches"] == [p.name for p in series.patches]
        assert applied["series_digest"] == series.digest
        for name, data in state_files.items():
            assert zf.read(f"{dist_info}/{name}") == data, name
        added = {n for n in zf.namelist() if n.startswith(f"{dist_info}/overlay/")}
        assert added == {f"{dist_info}/{n}" for n in state_files}


def test_unchanged_members_keep_their_compressed_bytes(rebuilt, release_wheel, series):
    old_dist, changed = f"torch-{TORCH_RELEASE}.dist-info", set(series.touched)
    changed |= {f"{old_dist}/METADATA", f"{old_dist}/RECORD"}
    with zipfile.ZipFile(release_wheel) as old, zipfile.ZipFile(rebuilt.path) as new, \
            open(release_wheel, "rb") as old_f, open(rebuilt.path, "rb") as new_f:
        new_dist = dist_info_of(new)
        copied = [i for i in old.infolist() if i.filename not in changed]
        assert len(copied) > 11000
        differing = []
        for info in copied:
            twin = new.getinfo(new_dist + info.filename[len(old_dist):] if info.filename.startswith(old_dist)
                               else info.filename)
            same_entry = (info.CRC, info.compress_type, info.compress_size, info.file_size, info.date_time,
                          info.external_attr) == (twin.CRC, twin.compress_type, twin.compress_size,
                                                  twin.file_size, twin.date_time, twin.external_attr)
            old_hash, new_hash = hashlib.sha256(), hashlib.sha256()
            for chunk in compressed_data(old_f, info):
                old_hash.update(chunk)
            for chunk in compressed_data(new_f, twin):
                new_hash.update(chunk)
            if not same_entry or old_hash.digest() != new_hash.digest():
                differing.append(info.filename)
        assert not differing


def test_progress_on_stderr(rebuilt):
    lines = rebuilt.stderr.splitlines()
    percents = [int(m.group(1)) for l in lines if (m := re.match(r"rebuild-wheel: (\d+)% \(\d+ of \d+ MiB\)$", l))]
    assert percents == list(range(10, 101, 10))
    assert re.match(rf"rebuild-wheel: wrote {re.escape(rebuilt.path.name)} \(\d+ MiB\) in [\d.]+ s$", lines[-1])


def test_local_version_label_is_normalized(release_wheel, tmp_path):
    out = tmp_path / "out"
    path = Path(overlay_cli("rebuild-wheel", str(release_wheel), "-o", str(out), "--local-version", "Cluster_A-7",
                            check=True).stdout.strip())
    assert path == out / f"torch-{TORCH_RELEASE}+cluster.a.7-cp311-cp311-manylinux1_x86_64.whl"
    with zipfile.ZipFile(path) as zf:
        assert dist_info_of(zf) == f"torch-{TORCH_RELEASE}+cluster.a.7.dist-info"
        assert f"\nVersion: {TORCH_RELEASE}+cluster.a.7\n" in zf.read(f"{dist_info_of(zf)}/METADATA").decode()


def test_interrupted_rebuild_leaves_no_partial_wheel(release_wheel, tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    env["TORCH_OVERLAY_FAILPOINT"] = "rebuild-wheel-copied:sleep"
    # SIGINT back to its default in the child: a test run started in the background by a shell without job
    # control inherits SIGINT ignored, and the interrupt below would then never reach the rebuild.
    proc = subprocess.Popen([sys.executable, "-m", "torch_overlay", "rebuild-wheel", str(release_wheel),
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stderr:
            if "failpoint rebuild-wheel-copied reached" in line:
                break
        (partial,) = out.iterdir()  # the whole release has been copied into the hidden partial file
        assert partial.name.startswith(".") and partial.stat().st_size > 800 << 20
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) != 0
    finally:
        proc.kill()
        proc.wait()
    assert list(out.iterdir()) == []


# -- refused input: exit status 2, a message, and nothing in the output folder ---------------------

def assert_refused(args, out: Path, message: str) -> None:
    out.mkdir(exist_ok=True)
    proc = overlay_cli("rebuild-wheel", *args, "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "unchanged: no wheel was written" in proc.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("kind", ["text", "zip without dist-info", "missing"])
def test_non_wheel_file_is_refused(kind, tmp_path):
    wheel = tmp_path / "notes-1.0-py3-none-any.whl"
    if kind == "text":
        wheel.write_text("not a zip archive\n")
        message = f"{wheel} is not a wheel (not a zip archive)"
    elif kind == "zip without dist-info":
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("notes/__init__.py", "")
        message = f"{wheel.name} is not a wheel: expected one .dist-info folder"
    else:
        message = f"cannot read {wheel}: No such file or directory"
    assert_refused([str(wheel)], tmp_path / "out", message)


@pytest.fixture(scope="module")
def other_wheel(tmp_path_factory):
    """A tiny valid wheel of another project (written directly: the .venv has no 'wheel' package
    for 'pip wheel --no-build-isolation', and an isolated build would need the registry)."""
    import base64
    import hashlib
    import zipfile

    root = tmp_path_factory.mktemp("throwaway")
    wheel = root / "throwaway_thing-1.0-py3-none-any.whl"
    files = {
        "throwaway_thing.py": b"VALUE = 1\n",
        "throwaway_thing-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: throwaway-thing\nVersion: 1.0\n",
        "throwaway_thing-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("throwaway_thing-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("throwaway_thing-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_non_torch_wheel_is_refused(other_wheel, tmp_path):
    assert_refused([str(other_wheel)], tmp_path / "out", f"{other_wheel.name} is a wheel of throwaway-thing, not of torch")


def test_relabelled_wheel_is_refused(rebuilt, series, tmp_path):
    assert_refused([str(rebuilt.path)], tmp_path / "out",
                   f"is torch {TORCH_RELEASE}+{series.label}, which already has a local version label "
                   f"(+{series.label})")


@pytest.mark.parametrize("label", ["+overlay", "over lay", "overlay..1", "-overlay", "overlay.", "überlay", ""])
def test_invalid_local_version_is_refused(label, release_wheel, tmp_path):
    assert_refused([str(release_wheel), f"--local-version={label}"], tmp_path / "out",
                   f"--local-version {label!r} is not a PEP 440 local version label")


# -- the rebuilt wheel installed by pip ---------------------------------------------------------

@dataclass
class Installed:
    python: Path
    site: Path
    deps_pth: Path  # puts torch_overlay and torch's dependencies (from the repo .venv) on sys.path


@pytest.fixture(scope="module")
def installed(rebuilt, tmp_path_factory):
    """A fresh venv with the rebuilt wheel pip-installed.

    Only torch itself is installed (--no-deps): its dependencies are the repo
    .venv's, added to sys.path by a .pth after this venv's own site-packages
    (the CUDA ones are several GB that no cache here holds).  The .pth is
    written after pip has run, so pip only ever sees this venv."""
    root = tmp_path_factory.mktemp("installed")
    subprocess.run([str(VENV / "bin" / "python"), "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    started = time.monotonic()
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(rebuilt.path)], check=True)
    print(f"\npip install of the rebuilt wheel: {time.monotonic() - started:.1f} s")
    site = site_packages(root / "venv")
    deps_pth = site / "zz_torch_overlay_test.pth"
    deps_pth.write_text(f"{REPO}\n{site_packages(VENV)}\n")
    yield Installed(python, site, deps_pth)
    shutil.rmtree(root)


def test_installed_wheel_reports_the_series_applied(installed, series):
    out = overlay_cli("status", python=installed.python, check=True).stdout
    assert f"torch {TORCH_RELEASE}+{series.label} at {installed.site / 'torch'}" in out
    assert "applied: " + ", ".join(p.name for p in series.patches) + "\n" in out
    assert "files differing from RECORD: none" in out
    probe = subprocess.run([str(installed.python), "-c", "import torch, torch.fx.traceback as t; "
                            "print(torch.__file__); print(callable(t.annotate))"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.split() == [str(installed.site / "torch" / "__init__.py"), "True"]


def test_revert_restores_the_release_then_uninstall_leaves_nothing(installed, release_wheel, series):
    with zipfile.ZipFile(release_wheel) as old:
        release_record = Record.parse(old.read(f"torch-{TORCH_RELEASE}.dist-info/RECORD").decode()).entries()
    overlay_cli("revert", python=installed.python, check=True)
    for path in series.touched:
        if path in series.created:  # not in the release: revert removes it
            assert not (installed.site / path).exists(), path
            continue
        assert record_hash((installed.site / path).read_bytes()) == release_record[path], path
    out = overlay_cli("status", python=installed.python, check=True).stdout
    assert "applied: none" in out and "files differing from RECORD: none" in out

    (dist_info,) = installed.site.glob("torch-*.dist-info")
    installed.deps_pth.unlink()  # pip must see this venv's torch only
    subprocess.run([str(installed.python), "-m", "pip", "uninstall", "-q", "-y", "torch"], check=True)
    assert not dist_info.exists(), sorted(p.name for p in dist_info.rglob("*"))
    assert not any((installed.site / path).exists() for path in series.touched)
