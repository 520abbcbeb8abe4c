"""One host CPU timed by one process at a time: a file lock the pytest-xdist workers of one run share.

xdist workers on the CPU backend would time their steps on the same cores, each clock counting the others' load
(unchanged code failed at -20% and recorded spreads of 27.6% under ``-n 2``, 0.9% serially). The workers of one
run open the same lock file (its folder made by the controller, ``ENV_DIR``) and hold an exclusive ``flock`` on it
while they time a step on the host CPU; the rest of a test (set-up, probes, counting, judging) still runs in
parallel. A worker names the file in its environment (``ENV_FILE``), so the fresh processes it starts (replicas,
confirmations) take the same lock around their own timing, not around their start-up, and never while their parent
waits holding it. A process without the lock (no xdist, one worker) never locks. Standard library only.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The folder of the run's lock file, set by the xdist controller for the workers it starts.
ENV_DIR = "GPUPERF_CPU_LOCK_DIR"
#: The lock file, set by a worker for the fresh processes it starts.
ENV_FILE = "GPUPERF_CPU_LOCK_FILE"
LOCK_NAME = "cpu-timing.lock"


class CpuLock:
    """An exclusive ``flock`` on one file, re-entrant within this process (a confirmation timed inside a held
    replication must not wait on itself); :attr:`uses` counts the outermost acquisitions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.depth = 0
        self.uses = 0
        self._fd: int | None = None

    def acquire(self) -> None:
        """Wait until no other process holds the lock, then hold it (only counted again when already held)."""
        if self.depth == 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            self.uses += 1
        self.depth += 1

    def release(self) -> None:
        """Let the next process in when the outermost hold ends."""
        self.depth -= 1
        if self.depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The lock held for the ``with`` block."""
        self.acquire()
        try:
            yield
        finally:
            self.release()


_active: CpuLock | None = None
_workers = 0


def lock_path(run_id: str = "") -> Path:
    """The run's lock file: in the controller's folder (``ENV_DIR``), else one named by the xdist run id."""
    folder = os.environ.get(ENV_DIR)
    if folder and Path(folder).is_dir():
        return Path(folder) / LOCK_NAME
    return Path(tempfile.gettempdir()) / f"gpuperf-cpu-lock-{run_id or 'run'}.lock"


def configure(path: Path | None, workers: int = 0) -> None:
    """Serialise this process's host-CPU timing, and its children's, on ``path`` among ``workers`` processes
    (None: never lock)."""
    global _active, _workers
    _active, _workers = (CpuLock(path), workers) if path is not None else (None, 0)
    if path is not None:
        os.environ[ENV_FILE] = str(path)
    else:
        os.environ.pop(ENV_FILE, None)


def active() -> CpuLock | None:
    """This process's lock: configured here, or named by the worker that started this process."""
    global _active
    if _active is None and os.environ.get(ENV_FILE):
        _active = CpuLock(Path(os.environ[ENV_FILE]))
    return _active


def workers() -> int:
    """How many workers share the lock (0: not configured in this process)."""
    return _workers


@contextmanager
def serialised(on_host_cpu: bool) -> Iterator[None]:
    """The run's CPU lock held for the block when this process is configured and the timing is on the host CPU."""
    lock = active() if on_host_cpu else None
    if lock is None:
        yield
        return
    with lock.held():
        yield
