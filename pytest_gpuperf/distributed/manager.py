"""Which pools are alive: one at a time, rebuilt after a fault, all killed at session end or exit."""

from __future__ import annotations

import atexit
from dataclasses import dataclass, field

from pytest_gpuperf.distributed.pool import PoolOutcome, RankPool
from pytest_gpuperf.distributed.tasks import RankTask


@dataclass
class PoolStats:
    """Bookkeeping shown in the terminal summary and used by the benchmark."""

    started: int = 0
    rebuilt_after_fault: int = 0
    tests: int = 0
    start_seconds: float = 0.0


@dataclass
class PoolManager:
    """Hands out a live pool for a (world size, backend), starting or rebuilding it as needed.

    Only one pool lives at a time (ranks of another world size are stopped first),
    so a session never holds more processes than its largest world. With
    ``reuse=False`` every test gets a fresh launch (the one-launch-per-test mode).
    """

    start_timeout: float = 300.0
    pg_timeout: float = 1800.0
    reuse: bool = True
    pool: RankPool | None = None
    stats: PoolStats = field(default_factory=PoolStats)
    _fault_pending: bool = False

    def __post_init__(self) -> None:
        atexit.register(self.close)

    def get(self, world_size: int, backend: str) -> RankPool:
        """A live pool of ``world_size`` ranks on ``backend``."""
        if self.pool is not None and (self.pool.key != (world_size, backend) or not self.pool.alive):
            self.close()
        if self.pool is None:
            pool = RankPool(world_size, backend, pg_timeout=self.pg_timeout)
            pool.start(self.start_timeout)
            self.pool = pool
            self.stats.started += 1
            self.stats.start_seconds += pool.start_seconds
            if self._fault_pending:
                self.stats.rebuilt_after_fault += 1
                self._fault_pending = False
        return self.pool

    def run(self, task: RankTask, world_size: int, timeout: float) -> PoolOutcome:
        """Run ``task`` on a pool of ``world_size``; a broken pool is closed so the next test gets a new one."""
        pool = self.get(world_size, task.backend)
        try:
            outcome = pool.run(task, timeout)
        except BaseException:  # Ctrl-C: the pool was killed on the way out
            self.close(graceful=False)
            raise
        self.stats.tests += 1
        if outcome.broken:
            self._fault_pending = True
            self.close(graceful=False)
        elif not self.reuse:
            self.close()
        return outcome

    def close(self, graceful: bool = True) -> None:
        """Stop the live pool, if any (SIGKILL whatever does not stop)."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.close(graceful=graceful)
