"""pytest-xdist on the CPU backend: the workers of one run time their steps one at a time under a file lock.

The ordering checks use two processes and a log both append to; no assertion compares timings."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.procs import cpu_lock
from pytest_gpuperf.procs.cpu_lock import CpuLock, serialised

#: A second process: notes that it is about to wait, takes the lock, notes that it holds it.
OTHER = """
import sys
from pathlib import Path
from pytest_gpuperf.procs.cpu_lock import CpuLock

lock_path, log = Path(sys.argv[1]), Path(sys.argv[2])
with log.open("a") as out:
    out.write("B waits\\n")
with CpuLock(lock_path).held():
    with log.open("a") as out:
        out.write("B holds\\n")
"""

#: A second process that only tries: "busy" when another process holds the lock.
PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("busy")
"""


def _wait_for(path: Path, line: str, deadline_s: float = 120.0) -> None:
    """Until ``path`` holds ``line`` (a loaded machine may take long to start a Python)."""
    end = time.monotonic() + deadline_s
    while line not in (path.read_text().splitlines() if path.exists() else []):
        assert time.monotonic() < end, f"{line!r} never appeared in {path}"
        time.sleep(0.02)


def _probe(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True).stdout.strip()


def test_a_second_process_takes_the_lock_only_after_the_first_lets_go(tmp_path: Path) -> None:
    lock_path, log = tmp_path / "cpu.lock", tmp_path / "log"
    lock = CpuLock(lock_path)
    lock.acquire()
    other = subprocess.Popen([sys.executable, "-c", OTHER, str(lock_path), str(log)])
    try:
        _wait_for(log, "B waits")
        assert _probe(lock_path) == "busy"
        with log.open("a") as out:
            out.write("A lets go\n")
    finally:
        lock.release()
    assert other.wait(timeout=120) == 0
    assert log.read_text().splitlines() == ["B waits", "A lets go", "B holds"]
    assert _probe(lock_path) == "free"


def test_the_lock_is_reentrant_within_a_process_and_counts_outer_holds(tmp_path: Path) -> None:
    lock = CpuLock(tmp_path / "cpu.lock")
    with lock.held(), lock.held():  # a confirmation timed inside a held replication
        assert lock.depth == 2 and _probe(lock.path) == "busy"
    assert lock.depth == 0 and lock.uses == 1 and _probe(lock.path) == "free"


def test_only_a_configured_process_timing_on_the_host_cpu_locks(tmp_path: Path) -> None:
    path = tmp_path / "cpu.lock"
    try:
        cpu_lock.configure(None)
        with serialised(True):
            assert cpu_lock.active() is None  # no xdist: nothing to share
        cpu_lock.configure(path, 2)
        with serialised(False):  # a GPU step: each worker has its own device
            assert not path.exists()
        with serialised(True):
            assert _probe(path) == "busy"
        assert cpu_lock.workers() == 2 and (cpu_lock.active() or CpuLock(path)).uses == 1
    finally:
        cpu_lock.configure(None)


def test_a_fresh_process_of_a_worker_locks_its_own_timing_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "cpu.lock"
    child = "from pytest_gpuperf.procs.cpu_lock import active; lock = active(); print(lock.path if lock else None)"
    try:
        cpu_lock.configure(path, 2)
        named = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
        assert named.stdout.strip() == str(path)
    finally:
        cpu_lock.configure(None)
    alone = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert alone.stdout.strip() == "None"


def test_the_lock_file_lies_in_the_controllers_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_lock.ENV_DIR, str(tmp_path))
    assert cpu_lock.lock_path("abc") == tmp_path / cpu_lock.LOCK_NAME
    monkeypatch.delenv(cpu_lock.ENV_DIR)
    assert cpu_lock.lock_path("abc").name == "gpuperf-cpu-lock-abc.lock"


TWO_STEPS = """
import pytest, torch

@pytest.mark.parametrize("n", [64, 96])
@pytest.mark.gpuperf(informational={"cpu": "bound"})  # the class follows the shared machine's load
def test_matmul(gpuperf, n):
    a = torch.randn(n, n)
    gpuperf.measure(lambda: a @ a, memory=False)
"""


def test_two_cpu_workers_time_one_at_a_time_and_say_so(pytester: pytest.Pytester, unchanged_args: list[str]) -> None:
    pytester.makepyfile(test_two=TWO_STEPS)
    args = ["--gpuperf-backend", "cpu", *unchanged_args]
    # Recorded in one process (recording from xdist workers is test_xdist_workers.py's): the baselines the two
    # workers then judge against; each xdist worker is a fresh python importing torch.
    pytester.runpytest("--gpuperf", "--gpuperf-update", *args).assert_outcomes(passed=2)
    result = pytester.runpytest("--gpuperf", "-n", "2", *args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["CPU timing serialised across 2 xdist workers*"])
    assert result.stdout.str().count("CPU timing serialised") == 1
