"""Worker processes never outlive pytest and leave no folders behind; their output survives their death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pytest_gpuperf.procs import folders as processes
from pytest_gpuperf.procs.folders import OWNER_FILE, make_pool_dir, sweep_stale_pool_dirs
from pytest_gpuperf.procs.lifetime import process_alive, process_start_time

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _tagged(tag: str, exclude: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Live (non-zombie) processes whose environment carries ``tag``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        try:
            if pid not in exclude and tag.encode() in (entry / "environ").read_bytes() and process_alive(pid):
                found.append(pid)
        except OSError:
            continue
    return found


def _wait_for(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@linux_only
def test_a_zombie_parent_counts_as_dead_although_os_kill_0_still_succeeds() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert _wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 60)
    os.kill(child.pid, 0)  # the old watchdog's test: succeeds on a zombie
    assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(child.pid)
    assert process_alive(os.getpid(), process_start_time(os.getpid()))
    assert not process_alive(os.getpid(), "1"), "a recycled pid (other start time) is not the parent"


@linux_only
def test_pool_folders_of_dead_owners_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    mine = tmp_path / "gpuperf-pool-ws2-live"
    mine.mkdir()
    (mine / OWNER_FILE).write_text(f"{os.getpid()} {process_start_time(os.getpid())}\n")
    recycled = tmp_path / "gpuperf-pool-ws2-recycled"
    recycled.mkdir()
    (recycled / OWNER_FILE).write_text(f"{os.getpid()} 1\n")
    old = tmp_path / "gpuperf-pool-ws2-old-version"
    old.mkdir()
    (old / "launcher.log").write_text("x")
    os.utime(old, (time.time() - 2 * processes.STALE_SECONDS,) * 2)
    fresh = tmp_path / "gpuperf-pool-ws2-being-created"
    fresh.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    removed = sweep_stale_pool_dirs(tmp_path)
    assert sorted(p.name for p in removed) == ["gpuperf-pool-ws2-old-version", "gpuperf-pool-ws2-recycled"]
    assert mine.exists() and fresh.exists() and other.exists()


def test_a_pool_removes_its_folder_when_it_closes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes.tempfile, "tempdir", str(tmp_path))
    from pytest_gpuperf.distributed.pool import RankPool

    pool = RankPool(2, "cpu")
    assert pool.directory.parent == tmp_path and (pool.directory / OWNER_FILE).exists()
    pool.close()
    assert list(tmp_path.iterdir()) == []
    directory = make_pool_dir("solo")
    assert directory.name.startswith("gpuperf-pool-solo-")


HANGS = """
import os
import time

import pytest


@pytest.mark.gpuperf_distributed(world_size=2)
def test_hangs(gpuperf_rank):
    if gpuperf_rank.rank == 0:
        open(os.environ["GPUPERF_TEST_STARTED"], "w").close()
    time.sleep(3600)
"""

INTERMEDIATE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_hangs.py"])
print(child.pid, flush=True)
time.sleep(600)  # never reaps the pytest process: once killed it stays a zombie
"""


@linux_only
def test_ranks_exit_when_pytest_is_killed_and_left_a_zombie_by_its_parent(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"gpuperf-zombie-check-{uuid.uuid4().hex}"
    started = pytester.path / "started"
    monkeypatch.setenv("GPUPERF_TEST_TAG", tag)
    monkeypatch.setenv("GPUPERF_TEST_STARTED", str(started))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    pytester.makepyfile(test_hangs=HANGS)
    parent = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE], cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert parent.stdout is not None
        pytest_pid = int(parent.stdout.readline())
        assert _wait_for(started.exists, 300), "the ranks never started the test body"
        ranks = _tagged(tag, {parent.pid, pytest_pid})
        assert ranks, "no rank processes found"
        os.kill(pytest_pid, signal.SIGKILL)
        assert _wait_for(lambda: not process_alive(pytest_pid), 30)
        assert Path(f"/proc/{pytest_pid}").exists(), "pytest should stay a zombie (its parent never reaps it)"
        gone = _wait_for(lambda: not _tagged(tag, {parent.pid, pytest_pid}), 60)
        assert gone, f"processes outlived the killed pytest: {_tagged(tag, {parent.pid, pytest_pid})}"
    finally:
        parent.kill()
        parent.wait()
        for pid in _tagged(tag):
            os.kill(pid, signal.SIGKILL)


def test_a_pool_that_fails_to_start_says_why_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes.tempfile, "tempdir", str(tmp_path))
    from pytest_gpuperf.distributed.pool import PoolStartError, RankPool

    pool = RankPool(1, "cpu", solo=True)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(PoolStartError, match="the worker exited with code 1 before all 1 rank"):
        pool.start(timeout=60)
    assert list(tmp_path.iterdir()) == []
