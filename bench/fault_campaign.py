"""The fault campaign: the tool on a hostile machine, trial after trial, checked from outside the tool.

usage: .venv/bin/python bench/fault_campaign.py [--trials N] [--seed S] [--only NAME,...] [--pip-trials K]
                                                [--pip-at COMMAND:MOVE,...]

Every trial runs on a scratch copy of .venv's torch 2.5.1 (test/overlay/scratch_torch.py; the shared .venv is
never touched) and starts from the pristine or the patched state. Scenarios, in turn:

  kill-random      apply or revert killed (-9) after a random delay (every third aimed at the moves)
  kill-failpoint   apply or revert killed at a random failpoint, before or after the commit point
  kill-rollback    a move fails (ENOSPC), and the undo is killed at a random step
  kill-recovery    apply killed after its commit point, then the recovering status killed at a later move
  disk-full        apply or revert with a random file-size limit (writes fail with EFBIG, as on a full disk)
  enospc-move      a move fails with ENOSPC at a random step
  immutable        a random target is chattr +i (a read-only file apply must replace)
  non-root         apply or revert as an unprivileged user (nobody)
  copied-venv      a pending journal in a venv copied with cp -al: the copy recovers into itself
  pip-emulated     apply or revert killed after its commit point, then the release's files put back over it
                   as 'pip install --force-reinstall' does: what the RECORD it reads does not list stays
                   (the staging folder, and the overlay state if the new RECORD was not in place yet)
  two-at-once      a second command while the first one holds the lock
  live-process     apply or revert while another process has this torch imported
  load-window      apply, revert or develop stopped (SIGSTOP) at a random point between its look for processes
                   that have torch loaded and its import barrier, while a job imports torch; then it goes on
                   and must refuse (naming the job, nothing changed), and the job must see a whole torch
  damaged-wheel    rebuild-wheel on a small real wheel with a random member damaged, or killed midway
  pip-reinstall    (--pip-trials, default 1; --pip-at aims them) a real 'pip install --force-reinstall
                   --no-deps' of the release wheel over a scratch whose apply or revert was killed after its
                   commit point

Violations (the campaign's goal is none): a mixed torch that a fresh 'import torch' does not refuse; a state
other than pristine or patched once the next command has run; stale bytecode; stray files; a traceback; a
refusal that changed something; an exit status other than the documented one (status: 0 consistent, 1 needs
action; refusals: 2).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "overlay"))
from fault_checks import (Saved, classify, damage_member, import_probe, load_torch_during,  # noqa: E402
                          small_release_wheel_of, snapshot, stale_bytecode, stray_files)
from scratch_torch import VENV, ScratchTorch, torch_wheel  # noqa: E402
from torch_overlay.record import Record  # noqa: E402
from torch_overlay.transaction import FAILPOINT_ENV  # noqa: E402

KILLED = -signal.SIGKILL


class Lab:
    """A scratch torch with its pristine and patched states saved, and what every trial checks."""

    def __init__(self, root: Path):
        self.root = root
        self.scratch = ScratchTorch(root / "scratch")
        self.pristine, self.saved = snapshot(self.scratch), {"pristine": Saved(self.scratch, root / "pristine")}
        self.scratch.run("apply", check=True)
        self.patched = snapshot(self.scratch)
        self.saved["patched"] = Saved(self.scratch, root / "patched")
        self.moves = self._count_moves()
        self.small_wheel = small_release_wheel_of(torch_wheel(), root / torch_wheel().name)
        self._checkout = None

    @property
    def checkout(self) -> Path:
        """A checkout with the series as commits (apply-source), for develop; made on first use."""
        if self._checkout is None:
            from source_fixtures import make_checkout, overlay_env

            patches = Path(__file__).resolve().parent.parent / "patches"
            checkout = make_checkout(self.root / "checkout", patches)
            subprocess.run([str(VENV / "bin" / "python"), "-m", "torch_overlay", "apply-source", str(checkout)],
                           env=overlay_env(patches), check=True, capture_output=True)
            self._checkout = checkout
        return self._checkout

    def _count_moves(self) -> dict:
        """The number of moves of apply and revert (the failpoints move:0 .. move:N-1)."""
        out = {}
        for command, start in (("apply", "pristine"), ("revert", "patched")):
            self.start(start)
            assert self.run(command, failpoint="journal").returncode == KILLED
            out[command] = len(json.loads((self.scratch.dist_info / "overlay-txn" / "journal.json").read_text())["moves"])
            self.run("status")
        return out

    def start(self, state: str) -> None:
        self.saved[state].restore()

    def state(self) -> str:
        return classify(snapshot(self.scratch), self.pristine, self.patched)

    def run(self, *args, failpoint: str | None = None, **kw) -> subprocess.CompletedProcess:
        return self.scratch.run(*args, env={FAILPOINT_ENV: failpoint} if failpoint else None, **kw)

    def popen(self, *args, failpoint: str | None = None) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
        if failpoint:
            env[FAILPOINT_ENV] = failpoint
        return subprocess.Popen([str(self.scratch.python), "-m", "torch_overlay", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    # -- checks ------------------------------------------------------------------------------------

    def after_interruption(self) -> list[str]:
        """Right after a kill: a mixed torch must refuse to import."""
        if self.state() == "mixed":
            seen = import_probe(self.scratch)
            if seen != "refused":
                return [f"mixed files, and import torch gave {seen}"]
        return []

    def recovered(self, expect_status: int = 0) -> list[str]:
        """The next command (status) leaves a whole torch, with valid bytecode and no stray file."""
        proc = self.run("status")
        problems = self.no_traceback(proc)
        if proc.returncode != expect_status:
            problems.append(f"status exited {proc.returncode}, not {expect_status}: {proc.stdout[-300:]}")
        return problems + self.whole()

    def whole(self, expected: str | None = None) -> list[str]:
        now = snapshot(self.scratch)
        state = classify(now, self.pristine, self.patched)
        if state == "mixed" or (expected and state != expected):
            return [f"torch is {state}" + (f", not {expected}" if expected else "")]
        problems = [f"stale bytecode: {p}" for p in stale_bytecode(self.scratch)]
        strays = stray_files(now, self.pristine if state == "pristine" else self.patched)
        return problems + ([f"stray files: {strays[:5]}"] if strays else [])

    def refused_unchanged(self, proc: subprocess.CompletedProcess, begin: str, *phrases: str) -> list[str]:
        problems = self.no_traceback(proc)
        if proc.returncode != 2:
            problems.append(f"exit {proc.returncode}, not a refusal (2): {proc.stderr[-300:]}")
        problems += [f"the refusal does not say {p!r}: {proc.stderr[-300:]}" for p in phrases if p not in proc.stderr]
        return problems + self.whole(begin)

    @staticmethod
    def no_traceback(proc: subprocess.CompletedProcess) -> list[str]:
        return [f"traceback: {proc.stderr.strip()[-300:]}"] if "Traceback" in proc.stderr else []


def _command(rng: random.Random) -> tuple[str, str, str]:
    """(command, the state it starts from, the state it ends in)."""
    return ("apply", "pristine", "patched") if rng.random() < 0.5 else ("revert", "patched", "pristine")


# -- scenarios: each returns (a short description, violations) ---------------------------------------------

def kill_random(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    lab.start(begin)
    aimed = rng.random() < 1 / 3
    proc = lab.popen(command, failpoint="journal:announce" if aimed else None)
    if aimed:  # the moves start right after the commit point announces itself
        proc.stderr.readline()
    delay = rng.uniform(0, 0.05 if aimed else 1.5)
    time.sleep(delay)
    proc.kill()
    proc.communicate()
    return f"{command} killed after {delay:.3f} s{' (aimed)' if aimed else ''}", \
        lab.after_interruption() + lab.recovered()


def kill_failpoint(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    points = ["built", "staged", "probed", "journal", "renamed", "moved", "done"] + [
        f"move:{i}" for i in range(lab.moves[command])] + (["revert-staged"] if command == "revert" else [])
    if command == "revert":
        points.remove("built")
    point = rng.choice(points)
    lab.start(begin)
    proc = lab.run(command, failpoint=point)
    problems = [] if proc.returncode == KILLED else [f"failpoint {point} not reached (exit {proc.returncode})"]
    return f"{command} killed at {point}", problems + lab.after_interruption() + lab.recovered()


def kill_rollback(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    failing = rng.randrange(1, lab.moves[command])
    step = rng.randrange(0, failing + 1)
    lab.start(begin)
    proc = lab.run(command, failpoint=f"move:{failing}:enospc,rollback:{step}")
    problems = [] if proc.returncode == KILLED else [f"rollback:{step} not reached (exit {proc.returncode})"]
    problems += lab.after_interruption() + lab.recovered()
    return f"{command}: move {failing} fails, undo killed at {step}", problems + lab.whole(begin)


def kill_recovery(lab: Lab, rng: random.Random):
    first = rng.randrange(0, lab.moves["apply"] - 1)
    second = rng.randrange(first + 1, lab.moves["apply"])
    lab.start("pristine")
    assert lab.run("apply", failpoint=f"move:{first}").returncode == KILLED
    proc = lab.run("status", failpoint=f"move:{second}")
    problems = [] if proc.returncode == KILLED else [f"recovery not killed at move:{second} (exit {proc.returncode})"]
    return f"apply killed at move:{first}, recovery at move:{second}", \
        problems + lab.after_interruption() + lab.recovered() + lab.whole("patched")


def disk_full(lab: Lab, rng: random.Random):
    command, begin, end = _command(rng)
    limit = rng.choice([4096, 65536, 1 << 20, 3 << 20, 8 << 20])
    lab.start(begin)

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    proc = subprocess.run([str(lab.scratch.python), "-m", "torch_overlay", command], capture_output=True, text=True,
                          preexec_fn=limited, env=env)
    what = f"{command} with files limited to {limit} bytes"
    if proc.returncode == 0:
        return what + " (fit)", lab.no_traceback(proc) + lab.whole(end)
    return what, lab.refused_unchanged(proc, begin)


def enospc_move(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    step = rng.randrange(0, lab.moves[command])
    lab.start(begin)
    proc = lab.run(command, failpoint=f"move:{step}:enospc")
    return f"{command}: ENOSPC at move {step}", \
        lab.refused_unchanged(proc, begin, "nothing was changed: the files already replaced were put back")


def immutable(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    lab.start(begin)
    target = lab.scratch.site / rng.choice(lab.scratch.targets + ["torch/__init__.py"])
    subprocess.run(["chattr", "+i", str(target)], check=True)
    try:
        proc = lab.run(command)
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    return f"{command} with {target.relative_to(lab.scratch.site)} immutable", lab.refused_unchanged(proc, begin)


def non_root(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    lab.start(begin)
    proc = lab.scratch.run(command, user=65534)
    return f"{command} as nobody", lab.refused_unchanged(proc, begin)


def copied_venv(lab: Lab, rng: random.Random):
    step = rng.randrange(1, lab.moves["apply"])
    lab.start("pristine")
    assert lab.run("apply", failpoint=f"move:{step}").returncode == KILLED
    before = snapshot(lab.scratch)
    copy = lab.root / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["cp", "-al", str(lab.scratch.venv), str(copy)], check=True)
    try:
        proc = subprocess.run([str(copy / "bin" / "python"), "-m", "torch_overlay", "status"], capture_output=True,
                              text=True)
        problems = lab.no_traceback(proc)
        if proc.returncode != 0 or f"torch 2.5.1 at {copy}" not in proc.stdout:
            problems.append(f"the copy did not recover into itself: {proc.stdout[-300:]} {proc.stderr[-300:]}")
        if snapshot(lab.scratch).hashes != before.hashes:
            problems.append("recovering the copy changed the original")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return f"apply killed at move:{step}, venv copied", problems + lab.recovered() + lab.whole("patched")


def _put_release_back_over(lab: Lab, state: str) -> None:
    """What 'pip install --force-reinstall' does: it removes the files the RECORD it reads lists and writes the
    release's; what that RECORD does not list stays where it is (the staging folder, which pip knows nothing
    of, and whatever the killed command had moved in before its new RECORD, or kept after the old one)."""
    site = lab.scratch.site
    listed = set(Record.parse((lab.scratch.dist_info / "RECORD").read_text()).entries())
    unlisted = sorted(rel for rel in snapshot(lab.scratch).files
                      if rel not in listed and rel not in lab.saved[state].files and (site / rel).is_file())
    aside = lab.root / "unlisted-aside"
    shutil.rmtree(aside, ignore_errors=True)
    for rel in unlisted:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(site / rel, aside / rel)
    lab.start(state)
    for rel in unlisted:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        os.replace(aside / rel, site / rel)


def pip_emulated(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    step = rng.randrange(0, lab.moves[command])
    lab.start(begin)
    assert lab.run(command, failpoint=f"move:{step}").returncode == KILLED
    _put_release_back_over(lab, "pristine")
    # The journal no longer matches, unless the killed command had not moved anything the reinstall restored.
    proc = lab.run("status")
    problems = lab.no_traceback(proc)
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and "was discarded, not replayed" not in proc.stdout):
        problems.append(f"status exited {proc.returncode}: {proc.stdout[-300:]}")
    if proc.returncode == 1:
        problems += lab.whole("pristine")
        if import_probe(lab.scratch) != "pristine":
            problems.append("the reinstalled torch does not import as the release")
    return f"{command} killed at move:{step}, release files put back", problems + lab.recovered()


def pip_reinstall(lab: Lab, rng: random.Random, aimed: tuple[str, int] | None = None):
    """A real pip reinstall of the release over a command killed after its commit point; ``aimed``: which
    command and move to kill (default: at random)."""
    command, begin, _ = _command(rng) if aimed is None else \
        {"apply": ("apply", "pristine", "patched"), "revert": ("revert", "patched", "pristine")}[aimed[0]]
    step = rng.randrange(1, lab.moves[command]) if aimed is None else aimed[1]
    what = f"{command} killed at move:{step}, real pip reinstall"
    lab.start(begin)
    assert lab.run(command, failpoint=f"move:{step}").returncode == KILLED
    pip = subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "--python", str(lab.scratch.python), "install",
                          "-q", "--no-deps", "--force-reinstall", "--no-index", str(torch_wheel())],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        return what, [f"pip failed: {pip.stderr[-300:]}"]
    proc = lab.run("status")
    problems = lab.no_traceback(proc)
    if proc.returncode != 1 or "was discarded, not replayed" not in proc.stdout:
        problems.append(f"status after pip: exit {proc.returncode}: {proc.stdout[-300:]}")
    seen = import_probe(lab.scratch)
    if seen != "pristine":
        problems.append(f"import torch after pip gave {seen}")
    again = lab.run("status")
    if again.returncode != 0 or "applied: none" not in again.stdout or (lab.scratch.dist_info / "overlay").exists():
        problems.append(f"the reinstalled torch is not reported pristine: exit {again.returncode}: "
                        f"{again.stdout[-300:]}")
    if lab.run("apply").returncode != 0 or import_probe(lab.scratch) != "patched":
        problems.append("apply after the reinstall did not give a patched torch")
    elif lab.run("status").returncode != 0:
        problems.append("status after apply over the reinstalled torch did not exit 0")
    # pip's files are new copies: the next trials start from the saved states again
    return what, problems


def two_at_once(lab: Lab, rng: random.Random):
    command, begin, end = _command(rng)
    second = rng.choice(["apply", "revert", "status"])
    lab.start(begin)
    first = lab.popen(command, failpoint="staged:sleep")
    try:
        first.stderr.readline()  # "failpoint staged reached": it holds the lock
        proc = lab.run(second)
        problems = lab.no_traceback(proc)
        if proc.returncode != 2 or "another torch-overlay command" not in proc.stderr:
            problems.append(f"the second command ({second}) was not refused: exit {proc.returncode}")
    finally:
        first.kill()
        first.wait()
    return f"{second} while {command} runs", problems + lab.recovered() + lab.whole(begin)


def live_process(lab: Lab, rng: random.Random):
    command, begin, _ = _command(rng)
    lab.start(begin)
    live = subprocess.Popen([str(lab.scratch.python), "-c", "import time, torch; print('ready', flush=True); "
                             "time.sleep(300)"], stdout=subprocess.PIPE, text=True)
    try:
        live.stdout.readline()
        proc = lab.run(command)
    finally:
        live.kill()
        live.wait()
    return f"{command} while a process has torch imported", \
        lab.refused_unchanged(proc, begin, f"PID {live.pid}")


WINDOW_POINTS = {  # failpoints after the first look for processes and before the import barrier
    "apply": ["built", "staged", "probed", "journal"],
    "revert": ["revert-staged", "staged", "probed", "journal"],
    "develop": ["staged", "probed", "journal"],
}


def load_window(lab: Lab, rng: random.Random):
    command = rng.choice(list(WINDOW_POINTS))
    begin = "patched" if command == "revert" else "pristine"
    point = rng.choice(WINDOW_POINTS[command])
    args = ["develop", str(lab.checkout)] if command == "develop" else [command]
    lab.start(begin)
    trial = load_torch_during(lab.scratch, args, point)
    problems = lab.refused_unchanged(trial.command, begin, f"PID {trial.job_pid}: ", "nothing was changed")
    if trial.job_saw != begin:
        problems.append(f"the job that loaded torch meanwhile then saw {trial.job_saw}")
    return f"{command} stopped at {point} while a job imports torch", problems


def damaged_wheel(lab: Lab, rng: random.Random):
    out = lab.root / "wheel-out"
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OVERLAY_")}
    cmd = [str(VENV / "bin" / "python"), "-m", "torch_overlay", "rebuild-wheel"]
    if rng.random() < 0.5:
        with zipfile.ZipFile(lab.small_wheel) as zf:
            member = rng.choice([i.filename for i in zf.infolist() if i.compress_size > 64])
        (lab.root / "damaged").mkdir(exist_ok=True)
        wheel = damage_member(lab.small_wheel, lab.root / "damaged" / lab.small_wheel.name, member)
        proc = subprocess.run(cmd + [str(wheel), "-o", str(out)], capture_output=True, text=True, env=env)
        leftovers = list(out.iterdir()) if out.exists() else []
        problems = Lab.no_traceback(proc)
        if proc.returncode != 2 or leftovers:
            problems.append(f"damaged {member}: exit {proc.returncode}, left {leftovers}")
        return f"rebuild-wheel of a wheel with {member} damaged", problems
    point = rng.choice(["rebuild-wheel-copied", "rebuild-wheel-written"])
    killed = subprocess.run(cmd + [str(lab.small_wheel), "-o", str(out)], capture_output=True, text=True,
                            env={**env, FAILPOINT_ENV: point})
    again = subprocess.run(cmd + [str(lab.small_wheel), "-o", str(out)], capture_output=True, text=True, env=env)
    problems = Lab.no_traceback(again)
    wheels = sorted(out.glob("*.whl"))
    if killed.returncode != KILLED or again.returncode != 0 or len(wheels) != 1 or len(list(out.iterdir())) != 1:
        problems.append(f"killed at {point} (exit {killed.returncode}), then exit {again.returncode}, "
                        f"left {[p.name for p in out.iterdir()]}")
    else:
        with zipfile.ZipFile(wheels[0]) as zf:
            if zf.testzip() is not None:
                problems.append("the rebuilt wheel is damaged")
    return f"rebuild-wheel killed at {point}, run again", problems


SCENARIOS = {f.__name__.replace("_", "-"): f for f in (
    kill_random, kill_failpoint, kill_rollback, kill_recovery, disk_full, enospc_move, immutable, non_root,
    copied_venv, pip_emulated, two_at_once, live_process, load_window, damaged_wheel)}


def campaign(trials: int, seed: int, only: list[str], pip_trials: int, root: Path, out=print,
             pip_at: list[tuple[str, int]] = ()) -> int:
    """Runs the trials (scenarios in turn) and prints a table; returns the number of violations.
    ``pip_at``: real pip trials aimed at (command, move), after the ``pip_trials`` random ones."""
    rng = random.Random(seed)
    lab = Lab(root)
    names = only or list(SCENARIOS)
    count, violations, done = Counter(), [], []
    started = time.perf_counter()
    plan = [(names[i % len(names)], None) for i in range(trials)] + [("pip-reinstall", None)] * pip_trials + [
        ("pip-reinstall", at) for at in pip_at]
    pip_trials += len(pip_at)
    for trial, (name, aimed) in enumerate(plan):
        what, problems = pip_reinstall(lab, rng, aimed) if name == "pip-reinstall" else SCENARIOS[name](lab, rng)
        count[name] += 1
        if name == "pip-reinstall":  # a few slow trials: each is named, clean or not
            done.append(f"  trial {trial} [{name}] {what}: {'clean' if not problems else 'see below'}")
        for p in problems:
            violations.append(f"trial {trial} [{name}] {what}: {p}")
        count[f"{name} violations"] += len(problems)
    out(f"fault campaign: {len(plan)} trials, seed {seed}, {time.perf_counter() - started:.0f} s")
    out(f"{'scenario':<16} {'trials':>6} {'violations':>10}")
    for name in [*names, *(["pip-reinstall"] if pip_trials else [])]:
        out(f"{name:<16} {count[name]:>6} {count[f'{name} violations']:>10}")
    out(f"{'all':<16} {len(plan):>6} {len(violations):>10}")
    for line in done:
        out(line)
    for v in violations:
        out("  " + v)
    return len(violations)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    ap.add_argument("--pip-trials", type=int, default=1, help="trials with a real pip reinstall (slow: ~1 min)")
    ap.add_argument("--pip-at", default="", metavar="COMMAND:MOVE,...",
                    help="more real pip trials, each killing COMMAND (apply or revert) at that move, e.g. apply:43")
    args = ap.parse_args()
    try:
        pip_at = [(c, int(m)) for c, m in (x.split(":") for x in args.pip_at.split(",") if x)]
    except ValueError:
        ap.error(f"--pip-at takes COMMAND:MOVE,..., not {args.pip_at!r}")
    if any(c not in ("apply", "revert") for c, _ in pip_at):
        ap.error("--pip-at: the command is apply or revert")
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    root = Path(tempfile.mkdtemp(prefix="fault-campaign-"))
    root.chmod(0o755)  # the non-root trials must reach the scratch
    try:
        return 1 if campaign(args.trials, args.seed, only, args.pip_trials, root, pip_at=pip_at) else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
