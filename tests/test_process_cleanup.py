"""Issue 24: every process the plugin starts is gone within 5 s of any signal to pytest, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cleanup_harness import LIMIT_SECONDS, SCENARIOS, make_project, signal_during_run

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc and prctl")


@pytest.mark.e2e
@linux_only
@pytest.mark.parametrize("kind", sorted(SCENARIOS))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_nothing_the_plugin_started_outlives_a_signal_to_pytest(tmp_path: Path, kind: str, sig: int) -> None:
    scenario = SCENARIOS[kind]
    make_project(tmp_path, scenario)
    outcome = signal_during_run(tmp_path, scenario, sig)
    assert outcome.busy >= scenario.ready, "the scenario's processes were not found before the signal"
    assert not outcome.survivors, f"alive {LIMIT_SECONDS:g} s after {signal.Signals(sig).name}: {outcome.survivors}"


@linux_only
def test_the_guard_kills_a_process_that_left_its_group_and_was_orphaned(tmp_path: Path) -> None:
    """torchrun starts each rank in a new session: killing the group misses it, the subreaper guard does not."""
    from pytest_gpuperf.procs.guard import popen_guarded
    from pytest_gpuperf.procs.lifetime import process_alive

    pid_file = tmp_path / "escapee"
    escape = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "os._exit(0)\n"  # its parent is gone: without a subreaper the sleeper would belong to init
    )
    proc = popen_guarded([sys.executable, "-c", escape])
    assert proc.wait(timeout=60) == 0
    escapee = int(pid_file.read_text())
    assert not process_alive(escapee), "the guard left an orphan of its command running"


@linux_only
def test_a_guarded_command_keeps_its_exit_status_and_its_signal() -> None:
    from pytest_gpuperf.procs.guard import run_guarded

    code, out, timed_out = run_guarded(
        [sys.executable, "-c", "print('hi'); raise SystemExit(7)"], timeout=60, stdout=subprocess.PIPE, text=True
    )
    assert (code, out, timed_out) == (7, "hi\n", False)
    code, _, _ = run_guarded([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert code == -signal.SIGTERM
    code, _, timed_out = run_guarded([sys.executable, "-c", "import time; time.sleep(600)"], timeout=1)
    assert (code, timed_out) == (-1, True)


@linux_only
def test_the_guard_runs_isolated_from_the_commands_pythonpath(tmp_path: Path) -> None:
    """An A/B worker of the ref's side gets another tree first on PYTHONPATH: the guard must not import from it."""
    from pytest_gpuperf.procs.guard import run_guarded

    shadow = tmp_path / "pytest_gpuperf"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowed package')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code, out, _ = run_guarded(
        [sys.executable, "-c", "print('ran')"], timeout=60, env=env, stdout=subprocess.PIPE, text=True
    )
    assert (code, out) == (0, "ran\n")


def test_how_a_process_ended_is_named_by_exit_code_or_signal() -> None:
    from pytest_gpuperf.procs.lifetime import describe_exit

    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert describe_exit(exited, wait=60) == "exited with code 3"
    killed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert describe_exit(killed, wait=60) == "was killed by signal 9 (SIGKILL)"
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert describe_exit(running, wait=0.01) == ""
    finally:
        running.kill()
        running.wait()
    assert describe_exit(None) == ""
