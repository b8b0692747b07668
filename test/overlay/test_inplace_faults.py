"""apply / revert / status against damaged, unwritable, copied and interrupted installations.

Every refusal is one message with exit status 2 (never a traceback) that leaves the files as
they were; see test_faults.py for kill -9 at every step.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from fault_checks import Saved, classify, import_probe, load_torch_during, snapshot, stale_bytecode, stray_files
from scratch_torch import REPO, VENV, ScratchTorch, torch_wheel
from torch_overlay.record import record_hash


@pytest.fixture(scope="module")
def lab():
    """One scratch torch for the module, with its pristine and patched states saved."""
    root = Path(tempfile.mkdtemp(prefix="inplace-faults-"))  # not under pytest's 0700 folder: nobody must reach it
    root.chmod(0o755)
    try:
        scratch = ScratchTorch(root / "scratch")
        pristine, saved_pristine = snapshot(scratch), Saved(scratch, root / "saved-pristine")
        scratch.run("apply", check=True)
        patched, saved_patched = snapshot(scratch), Saved(scratch, root / "saved-patched")
        saved_pristine.restore()
        yield scratch, pristine, patched, saved_pristine, saved_patched
    finally:
        shutil.rmtree(root)


@pytest.fixture
def scratch(lab):
    """The module's scratch, pristine at the start of every test."""
    lab[3].restore()
    yield lab[0]
    lab[3].restore()


def refused(proc: subprocess.CompletedProcess, *phrases: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr
    return proc.stderr


def state(lab) -> str:
    scratch, pristine, patched, *_ = lab
    return classify(snapshot(scratch), pristine, patched)


# -- 1. revert is byte-exact for every RECORD --------------------------------------------------------

@pytest.mark.parametrize("form", ["crlf", "no final newline", "crlf, no final newline"])
def test_revert_gives_back_record_byte_for_byte(scratch, form):
    record = scratch.dist_info / "RECORD"
    data = record.read_bytes().replace(b"\r\n", b"\n")  # pip writes either; start from LF
    if "crlf" in form:
        data = data.replace(b"\n", b"\r\n")
    if "no final newline" in form:
        data = data.rstrip(b"\r\n")
    record.write_bytes(data)
    scratch.run("apply", check=True)
    patched_record = record.read_bytes()
    assert (b"\r\n" in patched_record) == ("crlf" in form)
    assert patched_record.count(b"\r\n") in (0, patched_record.count(b"\n"))  # one line ending throughout
    assert "files differing from RECORD: none" in scratch.run("status", check=True).stdout
    scratch.run("revert", check=True)
    assert record.read_bytes() == data


# -- 2. a half-committed torch cannot be imported; every command recovers first ---------------------

def test_import_is_refused_until_an_interrupted_apply_is_finished(lab, scratch):
    init = scratch.site / "torch" / "__init__.py"
    before = os.stat(init)
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    assert state(lab) == "mixed"
    proc = subprocess.run([str(scratch.python), "-c", "import torch"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "ImportError: torch cannot be imported now" in proc.stderr
    assert "python -m torch_overlay status" in proc.stderr
    # The workspace command finishes it like status does, then takes the saved originals.
    ws = Path(tempfile.mkdtemp(prefix="ws-")) / "ws"
    try:
        proc = scratch.run("workspace", "2.5.1", str(ws))
        assert proc.returncode == 0, proc.stderr
        assert state(lab) == "patched"
    finally:
        shutil.rmtree(ws.parent)
    # The barrier costs nothing afterwards: torch/__init__.py is back as the very same file (inode
    # and mtime), so its bytecode stays valid.
    after = os.stat(init)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_demo_finishes_an_interrupted_revert_first(lab, scratch):
    lab[4].restore()  # patched
    assert scratch.run("revert", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    assert state(lab) == "mixed"
    proc = scratch.run("demo")
    assert proc.returncode == 0, proc.stderr
    assert "finished a torch-overlay command that was interrupted" in proc.stdout
    assert "the overlay is not applied" in proc.stdout
    assert state(lab) == "pristine"


# -- 3. an unwritable target is refused before anything changes -------------------------------------

@pytest.mark.parametrize("what", ["torch/_export", "torch/fx/traceback.py"])  # a folder holding a target; a target
def test_immutable_target_is_refused_before_anything_changes(lab, scratch, what):
    path = scratch.site / what
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a filesystem with the flag)")
    try:
        before = snapshot(scratch)
        err = refused(scratch.run("apply"), "cannot replace", "Operation not permitted", "nothing was changed")
        assert "lsattr" in err
        assert snapshot(scratch) == before
        assert not (scratch.dist_info / "overlay-txn").exists()
        refused(scratch.run("apply"), "cannot replace")  # refused again, never stuck
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    scratch.run("apply", check=True)
    assert state(lab) == "patched"


# -- 4. damaged state: one message each, exit status 2 ------------------------------------------------

def test_missing_record(scratch):
    (scratch.dist_info / "RECORD").unlink()
    refused(scratch.run("apply"), "cannot read torch's installation record", "reinstall torch")
    assert "problem: cannot read torch's installation record" in scratch.run("status", rc=1).stdout


def test_apply_force_with_a_deleted_target(lab, scratch):
    (scratch.site / "torch/fx/proxy.py").unlink()
    before = snapshot(scratch)
    for args in (["apply"], ["apply", "--force"]):
        refused(scratch.run(*args), "these torch files are missing (deleted after installation?): torch/fx/proxy.py",
                "--force cannot patch a file that is not there")
    assert snapshot(scratch) == before


def test_missing_saved_original(lab, scratch):
    lab[4].restore()
    saved = scratch.dist_info / "overlay" / "pristine" / "torch/fx/proxy.py.orig"
    saved.unlink()
    refused(scratch.run("revert"), "the saved original of torch/fx/proxy.py", "cannot be read",
            "pip install --force-reinstall --no-deps torch==2.5.1")
    assert not (scratch.dist_info / "overlay-txn").exists()


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b'{"files": 3}'])
def test_damaged_applied_json_is_reported_not_fatal(lab, scratch, content):
    lab[4].restore()
    (scratch.dist_info / "overlay" / "applied.json").write_bytes(content)
    before = snapshot(scratch)
    out = scratch.run("status", rc=1).stdout
    assert "problem: the overlay state" in out and "is unreadable" in out
    for command in ("apply", "revert"):
        refused(scratch.run(command), "the overlay state", "is unreadable", "pip install --force-reinstall")
    assert snapshot(scratch) == before


@pytest.mark.parametrize("field, value", [("pristine", 5), ("patched", None), ("record_line", ["x"])])
def test_applied_json_with_a_field_of_the_wrong_type_is_named(lab, scratch, field, value):
    """Well-formed JSON whose per-file hash is the integer 5 (or another wrong type) is damage, not
    state: status says so (exit 1) and apply/revert refuse, instead of "already applied"."""
    lab[4].restore()
    path = scratch.dist_info / "overlay" / "applied.json"
    state_json = json.loads(path.read_text())
    state_json["files"]["torch/_dynamo/guards.py"][field] = value
    path.write_text(json.dumps(state_json))
    before = snapshot(scratch)
    out = scratch.run("status", rc=1).stdout
    assert f"problem: the overlay state {path} is unreadable" in out
    for command in ("apply", "revert"):
        refused(scratch.run(command), f"the overlay state {path} is unreadable")
    assert snapshot(scratch) == before


def test_metadata_without_a_version_is_named(scratch):
    metadata = scratch.dist_info / "METADATA"
    metadata.write_text("".join(l for l in metadata.read_text().splitlines(keepends=True)
                                if not l.startswith("Version:")))
    before = snapshot(scratch)
    proc = scratch.run("status", rc=1)
    assert f"problem: cannot tell torch's version from {metadata}: it has no Version: header" in proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    refused(scratch.run("apply"), f"cannot tell torch's version from {metadata}", "pip install --force-reinstall")
    proc = scratch.run("revert", check=True)  # revert needs no version: here there is nothing to revert
    assert "nothing to revert" in proc.stdout and "Traceback" not in proc.stderr
    assert snapshot(scratch) == before


def test_status_json_and_exit_codes(scratch):
    """0 for a consistent torch (pristine, fully patched), 1 for one that needs action, with --json."""
    pristine = json.loads(scratch.run("status", "--json", check=True).stdout)
    assert pristine["exit_code"] == 0 and pristine["applied"] is None and pristine["problems"] == []
    assert pristine["torch_version"] == "2.5.1" and pristine["series"]["release"] == "2.5.1"
    scratch.run("apply", check=True)
    patched = json.loads(scratch.run("status", "--json", check=True).stdout)
    assert patched["applied"]["current"] is True and patched["applied"]["patches"] == patched["series"]["patches"]
    traceback_py = scratch.site / "torch/fx/traceback.py"
    traceback_py.write_bytes(traceback_py.read_bytes() + b"# local edit\n")
    modified = json.loads(scratch.run("status", "--json", rc=1).stdout)
    assert modified["exit_code"] == 1 and modified["modified"] == {"torch/fx/traceback.py": "differs from RECORD"}
    assert "to do: 'torch-overlay apply --force'" in scratch.run("status", rc=1).stdout


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"format": 1, "root": "/", "moves": []}',
                                     b'{"format": 1, "root": "../..", "moves": [["../../etc/x", null, true]]}'])
def test_damaged_journal_is_reported_not_fatal(lab, scratch, content):
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    (scratch.dist_info / "overlay-txn" / "journal.json").write_bytes(content)
    before = snapshot(scratch)
    out = scratch.run("status", rc=1).stdout
    assert "problem: the journal of an interrupted torch-overlay command" in out
    for command in ("apply", "revert", "demo"):
        refused(scratch.run(command), "is unreadable", "pip install --force-reinstall --no-deps torch==2.5.1",
                "then remove")
    assert snapshot(scratch) == before


@pytest.mark.parametrize("point", ["journal", "move:3"])
def test_stale_journal_is_not_replayed_over_a_reinstalled_torch(lab, scratch, tmp_path, point):
    """apply killed after its commit point, then 'pip install --force-reinstall' of the wheel: pip puts every
    file of the release back (torch/__init__.py included) and leaves the staging folder. Recovery must not
    replay the old journal over it: it discards the journal, leaves the files, says so (status exit 1)."""
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": point}).returncode == -signal.SIGKILL
    staging = scratch.dist_info / "overlay-txn"
    shutil.move(staging, tmp_path / "txn")
    lab[3].restore()  # what pip's reinstall writes: the release's files
    shutil.move(tmp_path / "txn", staging)
    if point == "journal":  # nothing had moved yet: the journal still matches, so it is replayed
        assert "finished a torch-overlay command" in scratch.run("status", check=True).stdout
        assert state(lab) == "patched"
        return
    proc = scratch.run("status", rc=1)
    assert "problem: the journal of an interrupted torch-overlay command no longer matches the files" in proc.stdout
    assert "it was discarded, not replayed (the files were left as found)" in proc.stdout
    assert "to do: run 'torch-overlay status' to see what is installed now, then 'torch-overlay apply'" in proc.stdout
    assert state(lab) == "pristine" and import_probe(scratch) == "pristine" and not staging.exists()
    assert "applied: none" in scratch.run("status", check=True).stdout


def test_real_pip_reinstall_after_the_state_folder_moved_leaves_no_overlay_state(lab, scratch):
    """apply killed after it moved the overlay state (applied.json, saved originals) into the dist-info folder
    but before the new RECORD, then a real 'pip install --force-reinstall': pip removes only what the RECORD
    it reads lists, so the state folder survives the reinstall. Recovery must not leave it behind: status
    would call the pristine torch patched, and apply would answer "already applied" (fault campaign, seed
    2027). RECORD does not list it, so recovery removes it with the journal it discards."""
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "journal"}).returncode == -signal.SIGKILL
    moves = json.loads((scratch.dist_info / "overlay-txn" / "journal.json").read_text())["moves"]
    lab[3].restore()
    state_move = [m[0] for m in moves].index(f"{scratch.dist_info.name}/overlay")
    assert [m[0] for m in moves][state_move + 1] == f"{scratch.dist_info.name}/RECORD"
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": f"move:{state_move}"}).returncode == -signal.SIGKILL
    subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "--python", str(scratch.python), "install", "-q",
                    "--no-deps", "--force-reinstall", "--no-index", str(torch_wheel())], check=True)
    assert (scratch.dist_info / "overlay" / "applied.json").exists()  # what pip leaves
    proc = scratch.run("status", rc=1)
    assert "it was discarded, not replayed" in proc.stdout, proc.stdout
    assert "applied: none" in scratch.run("status", check=True).stdout
    assert not (scratch.dist_info / "overlay").exists() and import_probe(scratch) == "pristine"
    assert "applied the torch" in scratch.run("apply", check=True).stdout
    assert import_probe(scratch) == "patched" and "files differing from RECORD: none" in scratch.run(
        "status", check=True).stdout


def test_overlay_state_that_record_does_not_list_is_named_not_believed(lab, scratch, tmp_path):
    """An overlay state folder without its RECORD lines (what the case above left behind before recovery
    removed it, with no journal left to tell): status must not call the release's files patched, and apply
    must not answer "already applied"; both name the folder and say to remove it."""
    scratch.run("apply", check=True)
    shutil.copytree(scratch.dist_info / "overlay", tmp_path / "overlay")
    scratch.run("revert", check=True)
    shutil.copytree(tmp_path / "overlay", scratch.dist_info / "overlay")
    before = snapshot(scratch)
    proc = scratch.run("status", rc=1)
    assert f"problem: the overlay state {scratch.dist_info / 'overlay'} is not in torch's installation record" \
        in proc.stdout, proc.stdout
    for command in ("apply", "revert"):
        refused(scratch.run(command), "is not in torch's installation record", f"rm -r {scratch.dist_info / 'overlay'}",
                "then run 'torch-overlay apply'")
    assert snapshot(scratch) == before and import_probe(scratch) == "pristine"
    shutil.rmtree(scratch.dist_info / "overlay")
    scratch.run("apply", check=True)
    assert state(lab) == "patched"


def test_journal_over_changed_files_with_the_stub_in_place_is_refused(lab, scratch):
    """Files changed after the interruption while torch/__init__.py is still the stub: neither finishing nor
    discarding gives a whole package, so recovery refuses and asks for a reinstall."""
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    target = scratch.site / scratch.targets[-1]
    target.write_bytes(target.read_bytes() + b"# changed after the interruption\n")
    before = snapshot(scratch)
    proc = scratch.run("status", rc=1)
    assert "files it was replacing have changed since" in proc.stdout and "pip install --force-reinstall" in proc.stdout
    assert snapshot(scratch) == before and import_probe(scratch) == "refused"


def test_staging_folder_name_taken_by_a_file(scratch):
    (scratch.dist_info / "overlay-txn").write_text("mine\n")
    before = snapshot(scratch)
    assert "problem: " in scratch.run("status", rc=1).stdout
    refused(scratch.run("apply"), "overlay-txn is in the way", "rm ")
    assert snapshot(scratch) == before


def test_apply_and_revert_refuse_while_a_process_has_torch_loaded(scratch):
    """A process that imported torch goes on importing its submodules from disk: replacing files under it
    would mix old and new modules, so apply and revert refuse (naming it) and change nothing; --force warns."""
    live = subprocess.Popen([str(scratch.python), "-c", "import sys, time, torch; print('ready', flush=True); "
                             "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline() == "ready\n"
        before = snapshot(scratch)
        err = refused(scratch.run("apply"), "running process(es) have this torch loaded", f"PID {live.pid}: ",
                      "-c import sys, time, torch", "nothing was changed", "pass --force")
        assert snapshot(scratch) == before, err
        proc = scratch.run("apply", "--force", check=True)
        assert proc.stderr.startswith("warning: torch-overlay apply goes on (--force)") and f"PID {live.pid}" in proc.stderr
        patched = snapshot(scratch)
        refused(scratch.run("revert"), f"PID {live.pid}: ", "torch-overlay revert")
        assert snapshot(scratch) == patched
    finally:
        live.kill()
        live.wait()
    scratch.run("revert", check=True)  # nobody has it loaded now
    assert snapshot(scratch) == before


@pytest.mark.parametrize("command, point", [("apply", "built"), ("apply", "journal"),
                                            ("revert", "revert-staged"), ("revert", "journal")])
def test_a_process_that_loads_torch_while_the_command_prepares_makes_it_refuse(lab, scratch, command, point):
    """The look for processes at the start of apply and revert is taken again once the import barrier is in
    place: a job that imported torch in between (here while the command is stopped at ``point``, after its first
    look and before the barrier, as a slow build or disk would hold it) is named, and the command backs out.
    Before that second look the command went on, and the job mixed the old torch.fx with the new torch._dynamo
    (apply: AttributeError ... 'annotate'; revert: silently)."""
    begin = "pristine" if command == "apply" else "patched"
    if command == "revert":
        lab[4].restore()
    before = snapshot(scratch)
    trial = load_torch_during(scratch, [command], point)
    refused(trial.command, "running process(es) have this torch loaded", f"PID {trial.job_pid}: ",
            "-c import sys, torch", "nothing was changed")
    assert snapshot(scratch) == before and state(lab) == begin
    assert not (scratch.dist_info / "overlay-txn").exists()
    assert trial.job_saw == begin  # its whole torch, as it was before the command
    assert import_probe(scratch) == begin


def test_apply_over_an_older_series_that_refuses_after_its_revert_says_so(lab, scratch, tmp_path):
    """apply over an older series first reverts, in a transaction of its own. A job that loads torch after that
    revert (apply stopped at 'built') is seen at the new series' barrier: the refusal says what the revert did,
    torch is the release, whole, and so is the job's."""
    lab[4].restore()
    newer = tmp_path / "patches"
    shutil.copytree(REPO / "patches", newer)
    patch = newer / "2.5.1" / "163673-annotate.patch"
    patch.write_text(patch.read_text().replace("Description: Backport", "Description: Backport (reworded)", 1))
    trial = load_torch_during(scratch, ["apply"], "built", env={"TORCH_OVERLAY_PATCHES": str(newer)})
    refused(trial.command, f"PID {trial.job_pid}: ", "unchanged: nothing was changed after this command's first "
            f"step, which reverted {len(scratch.targets)} files to the torch 2.5.1 release")
    assert state(lab) == "pristine" and trial.job_saw == "pristine"
    assert not (scratch.dist_info / "overlay-txn").exists()


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # RECORD is larger: its staging write fails


def test_disk_full_while_staging_leaves_nothing_behind(lab, scratch):
    before = snapshot(scratch)
    proc = subprocess.run([str(scratch.python), "-m", "torch_overlay", "apply"], capture_output=True, text=True,
                          preexec_fn=_limit_file_size)
    refused(proc, "could not stage the new files", "File too large", "nothing was changed")
    assert snapshot(scratch) == before
    assert not (scratch.dist_info / "overlay-txn").exists()


def test_disk_full_while_building_the_patched_files_is_refused(scratch):
    """Found by bench/fault_campaign.py: with almost no room, the scratch build's 'git init' died (SIGXFSZ)
    and apply printed a traceback."""
    def tiny_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    before = snapshot(scratch)
    proc = subprocess.run([str(scratch.python), "-m", "torch_overlay", "apply"], capture_output=True, text=True,
                          preexec_fn=tiny_files)
    refused(proc, "could not build the patched files in a scratch folder", "nothing was changed", "free some disk")
    assert snapshot(scratch) == before


# -- 5. an error after the commit point is a success with a warning -----------------------------------

def test_error_after_the_commit_point_is_success_with_a_warning(lab, scratch):
    proc = scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "moved:enospc"})
    assert proc.returncode == 0, proc.stderr
    assert "applied the torch 2.5.1 series" in proc.stdout
    assert proc.stderr.startswith("warning: the change is complete, but removing") and "Traceback" not in proc.stderr
    assert state(lab) == "patched"
    scratch.run("status", check=True)
    assert not stray_files(snapshot(scratch), lab[2])


# -- 6. status without write access --------------------------------------------------------------------

def test_status_without_write_access_reports_the_pending_command(lab, scratch):
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    before = snapshot(scratch)
    proc = scratch.run("status", user=65534)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr  # needs action
    assert "problem: a torch-overlay command was interrupted after its commit point" in proc.stdout
    assert "as the user that owns this environment" in proc.stdout
    assert snapshot(scratch) == before
    scratch.run("status", check=True)
    assert state(lab) == "patched"


# -- 7. the journal travels with a copy of the environment ---------------------------------------------

def test_copied_environment_recovers_into_itself(lab, scratch, tmp_path):
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    before = snapshot(scratch)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(scratch.venv), str(copy)], check=True)  # every write here is a rename
    python = copy / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "torch_overlay", "status"], capture_output=True, text=True)
    assert proc.returncode == 0 and "finished a torch-overlay command" in proc.stdout, proc.stderr
    assert f"torch 2.5.1 at {copy}" in proc.stdout
    assert snapshot(scratch) == before  # the original still has its own pending journal
    assert import_probe(scratch) == "refused"
    copy_site = next((copy / "lib").glob("python3*/site-packages"))
    for path in scratch.targets:
        assert record_hash((copy_site / path).read_bytes()) == \
            json.loads((copy_site / scratch.dist_info.name / "overlay/applied.json").read_text())["files"][path]["patched"]
    scratch.run("status", check=True)
    assert state(lab) == "patched"


# -- 9. nothing is written into torch's folders before the commit point ----------------------------

def test_bytecode_is_staged_with_the_sources(lab, scratch):
    """Bytecode is compiled in the staging folder and moved into place with its source: before the
    commit point nothing in torch's folders has changed, and a kill after the last move leaves
    valid bytecode for every target (no recompile is left to do, no .pyc.<id> file can be left)."""
    before = snapshot(scratch)
    proc = subprocess.Popen([str(scratch.python), "-m", "torch_overlay", "apply"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TORCH_OVERLAY_FAILPOINT": "staged:sleep"})
    try:
        assert "failpoint staged reached" in proc.stderr.readline()
        now = snapshot(scratch)
        assert now.hashes == before.hashes
        staging = f"{scratch.dist_info.relative_to(scratch.site)}/overlay-txn"
        assert [p for p in stray_files(now, before) if not p.startswith(staging)] == []
    finally:
        proc.kill()
        proc.wait()
    scratch.run("status", check=True)
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "moved"}).returncode == -signal.SIGKILL
    assert stale_bytecode(scratch) == []
    scratch.run("status", check=True)
    assert state(lab) == "patched" and not stray_files(snapshot(scratch), lab[2])


# -- 10. messages that say what is wrong ---------------------------------------------------------------

def test_deleted_and_modified_files_are_told_apart(scratch):
    (scratch.site / "torch/fx/proxy.py").unlink()
    traceback_py = scratch.site / "torch/fx/traceback.py"
    traceback_py.write_bytes(traceback_py.read_bytes() + b"# local edit\n")
    out = scratch.run("status", rc=1).stdout
    assert "files differing from RECORD: torch/fx/traceback.py, torch/fx/proxy.py (missing)\n" in out + "\n"
    err = refused(scratch.run("apply"), "missing (deleted after installation?): torch/fx/proxy.py")
    assert "modified locally" not in err


def test_status_of_a_patched_torch_without_a_series_advises_revert(lab, scratch, tmp_path):
    """A torch patched by a release this version of the tool has no series for (here: a patches folder without
    it): apply refuses, so status advises revert, which works (status used to advise 'apply' to update)."""
    lab[4].restore()
    env = {"TORCH_OVERLAY_PATCHES": str(tmp_path)}  # no series at all
    out = scratch.run("status", env=env, rc=1).stdout
    assert "series: none for this release" in out and "torch-overlay apply" not in out, out
    assert "(no series for this release in this version of torch-overlay: run 'torch-overlay revert' to put " \
           "the release's files back)" in out, out
    refused(scratch.run("apply", env=env), "has no patch series for torch 2.5.1")
    scratch.run("revert", env=env, check=True)
    assert state(lab) == "pristine"


def test_an_import_barrier_left_without_its_staging_folder_is_named(lab, scratch):
    """The stub torch/__init__.py of an interrupted command whose staging folder was deleted (by hand, after the
    kill): nothing can tell what torch should be, so status names the stub and the reinstall, and every other
    command refuses with that message (demo printed a traceback; status advised 'apply --force', which left the
    stub in place)."""
    assert scratch.run("apply", env={"TORCH_OVERLAY_FAILPOINT": "move:3"}).returncode == -signal.SIGKILL
    shutil.rmtree(scratch.dist_info / "overlay-txn")
    before = snapshot(scratch)
    stub = f"{scratch.site / 'torch/__init__.py'} is torch-overlay's import barrier"
    reinstall = "reinstall torch: pip install --force-reinstall --no-deps torch==2.5.1"
    out = scratch.run("status", rc=1).stdout
    assert f"problem: {stub}" in out and f"to do: {reinstall}" in out and "apply --force" not in out, out
    for command in (["demo"], ["apply", "--force"], ["revert"]):
        err = refused(scratch.run(*command), stub, reinstall)
        assert err.count("error: ") == 1, err
    assert snapshot(scratch) == before and import_probe(scratch) == "refused"


def test_series_that_does_not_fit_the_release_names_the_patch(scratch, tmp_path):
    """A series made for a release where a target file has moved (as in 2.9.1)."""
    patches = tmp_path / "patches"
    shutil.copytree(REPO / "patches", patches)
    moved = "torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py"
    owner = next(p for p in (patches / "2.5.1").glob("*.patch") if moved in p.read_text())
    owner.write_text(owner.read_text().replace(moved, "torch/_functorch/_aot_autograd/graph_capture.py"))
    before = snapshot(scratch)
    err = refused(scratch.run("apply", env={"TORCH_OVERLAY_PATCHES": str(patches)}),
                  f"patch {owner.name} does not apply to torch 2.5.1: it changes "
                  "torch/_functorch/_aot_autograd/graph_capture.py, which this torch does not have")
    assert "modified locally" not in err
    assert snapshot(scratch) == before
