"""Ctrl-C during a distributed test: the first ends the pool at once, a second exits without a traceback."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpuperf.distributed import pool as pool_module
from pytest_gpuperf.distributed.interrupt import MESSAGE
from pytest_gpuperf.distributed.manager import PoolManager
from pytest_gpuperf.distributed.tasks import RankTask
from pytest_gpuperf.procs.lifetime import process_alive
from tests.cleanup_harness import sigint_as_in_a_terminal

BODY = """
import os
import time


def body():
    open(os.environ["GPUPERF_TEST_STARTED"], "w").close()
    time.sleep(3600)
"""


def _wait_for(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def python_handles_sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process while the test runs, even if the suite runs in the
    background (a non-interactive shell's ``cmd &`` starts it with SIGINT ignored, and ``_thread.interrupt_main``
    then does nothing)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.e2e
def test_ctrl_c_while_ranks_run_a_test_kills_the_pool_without_the_graceful_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_handles_sigint: None
) -> None:
    started = tmp_path / "started"
    monkeypatch.setenv("GPUPERF_TEST_STARTED", str(started))
    monkeypatch.setattr(pool_module, "STOP_WAIT_SECONDS", 600.0)  # a graceful stop would wait this long
    (tmp_path / "sleeper_body.py").write_text(BODY)
    task = RankTask(
        node_id="sleeper_body.py::body",
        module_name="sleeper_body",
        module_file=str(tmp_path / "sleeper_body.py"),
        qualname="body",
        backend="cpu",
        sys_path=[str(tmp_path)],
    )
    manager = PoolManager(start_timeout=240)
    pids: list[int] = []

    def interrupt_when_started() -> None:
        if _wait_for(started.exists, 300):
            assert manager.pool is not None
            pids.extend(manager.pool.pids())
            _thread.interrupt_main()

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        manager.run(task, world_size=1, timeout=600)
    assert pids, "the body never started"
    assert manager.pool is None, "the interrupted pool is dropped"
    closing = threading.Thread(target=manager.close)  # what pytest_sessionfinish does next
    closing.start()
    closing.join(120)
    assert not closing.is_alive(), "closing after Ctrl-C waited for the graceful stop"
    assert _wait_for(lambda: not any(process_alive(pid) for pid in pids), 60), "rank processes survived Ctrl-C"


HANGS = """
import os
import time

import pytest


@pytest.fixture(scope="session", autouse=True)
def slow_teardown():
    yield
    open(os.environ["GPUPERF_TEST_TEARDOWN"], "w").close()
    time.sleep(600)


@pytest.mark.gpuperf_distributed(world_size=2)
def test_hangs(gpuperf_rank):
    if gpuperf_rank.rank == 0:
        open(os.environ["GPUPERF_TEST_STARTED"], "w").close()
    time.sleep(3600)
"""


def _tagged(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if tag.encode() in (entry / "environ").read_bytes() and process_alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_first_ctrl_c_stops_the_ranks_and_a_second_exits_cleanly(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"gpuperf-interrupt-check-{uuid.uuid4().hex}"
    started, teardown = pytester.path / "started", pytester.path / "teardown"
    monkeypatch.setenv("GPUPERF_TEST_TAG", tag)
    monkeypatch.setenv("GPUPERF_TEST_STARTED", str(started))
    monkeypatch.setenv("GPUPERF_TEST_TEARDOWN", str(teardown))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    pytester.makepyfile(test_hangs=HANGS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_hangs.py"],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=sigint_as_in_a_terminal,  # Ctrl-C must reach it even when this suite runs in the background
    )
    try:
        assert _wait_for(started.exists, 300), "the ranks never started the test body"
        ranks = [pid for pid in _tagged(tag) if pid != proc.pid]
        assert ranks
        proc.send_signal(signal.SIGINT)
        assert _wait_for(teardown.exists, 120), "pytest did not get to its teardown after the first Ctrl-C"
        assert _wait_for(lambda: not any(process_alive(pid) for pid in ranks), 60), "ranks survived the first Ctrl-C"
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = output.decode(errors="replace")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text
    assert MESSAGE.strip() in text
    assert "Traceback (most recent call last)" not in text, text
    assert _tagged(tag) == []
