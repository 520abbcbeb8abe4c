"""Start pytest on a project whose test keeps plugin-started processes busy, signal pytest, list what survives.

Used by ``tests/test_process_cleanup.py`` (one try per kind and signal) and by
``benchmarks/bench_cleanup_after_signals.py`` (10 tries each, a table). Every process the
outer pytest starts inherits ``GPUPERF_CLEANUP_MARK``; a survivor is a live (non-zombie)
process carrying it, or a descendant of pytest seen just before the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pytest_gpuperf.procs.lifetime import descendants, process_alive

#: What a cleanup must achieve: nothing of the plugin's left this long after the signal.
LIMIT_SECONDS = 5.0

HOLD_SCRIPT = """
import os, pathlib, time
pathlib.Path(os.environ["GPUPERF_READY_DIR"], "rank" + os.environ["RANK"]).touch()
time.sleep(600)
"""
TORCHRUN_TEST = """
def test_script(gpuperf, gpuperf_torchrun):
    gpuperf_torchrun.run("hold.py", nproc_per_node=2, timeout=600)
"""
AB_TEST = """
import os, pathlib, time

def test_hold(gpuperf):
    if os.environ.get("GPUPERF_AB_OUT"):  # inside an A/B worker
        pathlib.Path(os.environ["GPUPERF_READY_DIR"], f"worker{os.getpid()}").touch()
        time.sleep(600)
    gpuperf.record("x", 1.0)
"""
REPLICA_TEST = """
import os, pathlib, time
import torch

def test_hold(gpuperf):
    if os.environ.get("GPUPERF_POOL_WORKER") == "1":  # inside a replica worker
        pathlib.Path(os.environ["GPUPERF_READY_DIR"], f"replica{os.getpid()}").touch()
        time.sleep(600)
    a = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    gpuperf.measure(lambda: a @ a)
"""
COMMON = ["-p", "no:cacheprovider", "-p", "no:randomly", "-q"]
FAST = ["-o", "gpuperf_max_time=0.3", "-o", "gpuperf_min_samples=5"]


@dataclass(frozen=True)
class Scenario:
    """A project, the pytest arguments that run it, and how many ready files say its processes are busy."""

    name: str
    files: dict[str, str]
    args: list[str]
    ready: int
    git: bool = False


SCENARIOS = {
    "torchrun": Scenario("torchrun", {"hold.py": HOLD_SCRIPT, "test_hold.py": TORCHRUN_TEST}, ["--gpuperf"], 2),
    "ab": Scenario("ab", {"test_hold.py": AB_TEST}, ["--gpuperf", "--gpuperf-ab", "HEAD", *FAST], 1, git=True),
    "replica": Scenario(
        "replica",
        {"test_hold.py": REPLICA_TEST},
        ["--gpuperf", "--gpuperf-update", "-o", "gpuperf_processes=2", *FAST],
        1,
    ),
}


def make_project(root: Path, scenario: Scenario) -> None:
    """Write the scenario's files into ``root`` (a committed git repository for A/B)."""
    for name, text in scenario.files.items():
        (root / name).write_text(text)
    if scenario.git:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
        env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        (root / ".gitignore").write_text("baselines/\n")
        for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
            subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def marked(mark: str) -> set[int]:
    """Live processes whose environment carries ``GPUPERF_CLEANUP_MARK=<mark>``."""
    needle = f"GPUPERF_CLEANUP_MARK={mark}".encode()
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and process_alive(int(entry.name)):
                found.add(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


@dataclass
class Outcome:
    """What one try left behind: survivors after :data:`LIMIT_SECONDS`, and how long until none was left."""

    busy: int
    survivors: list[str]
    seconds: float


def _describe(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return str(pid)
    return f"{pid} {command[:120]}"


def signal_during_run(root: Path, scenario: Scenario, sig: int, start_timeout: float = 300.0) -> Outcome:
    """Run the scenario's pytest in ``root``, send ``sig`` once its processes are busy, see what is left."""
    mark = uuid.uuid4().hex
    ready = root / f"ready-{mark}"
    ready.mkdir()
    env = {**os.environ, "GPUPERF_CLEANUP_MARK": mark, "GPUPERF_READY_DIR": str(ready)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.pop("PYTEST_CURRENT_TEST", None)
    log = (root / f"pytest-{mark}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *scenario.args, *COMMON],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own group: SIGINT goes to the group, as a terminal's Ctrl-C does
        preexec_fn=sigint_as_in_a_terminal,
    )
    try:
        deadline = time.monotonic() + start_timeout
        while len(list(ready.iterdir())) < scenario.ready:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{scenario.name}: processes never got busy (pytest exit {proc.poll()}):\n"
                    + (root / f"pytest-{mark}.log").read_text()[-4000:]
                )
            time.sleep(0.05)
        busy = (set(descendants(proc.pid)) | marked(mark)) - {proc.pid}
        started = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        left: set[int] = set()
        while time.monotonic() - started < LIMIT_SECONDS:
            left = {p for p in busy | marked(mark) if p != proc.pid and process_alive(p)}
            if not left:
                break
            time.sleep(0.05)
        seconds = time.monotonic() - started
        return Outcome(len(busy), sorted(_describe(p) for p in left), seconds)
    finally:
        for pid in marked(mark) | {proc.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        log.close()


def sigint_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT back to its default disposition, as a terminal's shell starts a command.

    A command started in the background by a non-interactive shell (``cmd &``, ``nohup``; a CI runner's job can be
    one) inherits SIGINT *ignored*, exec keeps that, and Python then installs no KeyboardInterrupt handler: a
    SIGINT to the group would reach no process that acts on it. Such a run says nothing about Ctrl-C.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
