"""A pool of ranks of one world size, started once through ``torch.distributed.run`` and reused across tests.

The pytest process listens on a local socket; ``python -m torch.distributed.run
--standalone --nproc_per_node N -m pytest_gpuperf.distributed.worker`` starts the
ranks, each joins the default process group and connects back, proving it holds
the pool's random key before anything is unpickled (:mod:`.channel`: another local
process that connects to the port is refused unread). A test is sent to
every rank, each answers with a :class:`RankResult`. Faults end the pool:

* a rank raised: the others get a short grace period to finish (they may be
  waiting in a collective the failed rank never entered);
* nothing came back within the timeout: all threads' stacks of the stuck ranks
  are dumped (``faulthandler`` on SIGUSR1) into the outcome;
* a rank died (OOM killer, segfault): the launcher's output tail says how.

The caller then :meth:`RankPool.close` s the pool (SIGKILL to every rank's process
group and to the launcher's) and the next test starts a fresh one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from pytest_gpuperf.distributed.channel import AuthListener, new_key
from pytest_gpuperf.distributed.env import process_env, torchrun_command
from pytest_gpuperf.distributed.tasks import STATUS_ERROR, STATUS_OOM, RankResult, RankTask

ERROR_GRACE_SECONDS = 3.0
STACK_WAIT_SECONDS = 1.0


class PoolStartError(RuntimeError):
    """The ranks did not all connect back (the message carries the launcher's output)."""


@dataclass
class PoolOutcome:
    """What came back for one test: per-rank results and the faults seen."""

    results: dict[int, RankResult] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    died: list[int] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    timed_out: bool = False
    launcher_log: str = ""
    seconds: float = 0.0

    @property
    def broken(self) -> bool:
        """True when the pool must not run another test (a fault, or a rank said it is dirty)."""
        return bool(
            self.hung
            or self.died
            or any(r.status in (STATUS_ERROR, STATUS_OOM) or r.dirty for r in self.results.values())
        )


@dataclass
class _Rank:
    rank: int
    pid: int
    conn: Connection


class RankPool:
    """``world_size`` ranks on ``backend`` (``cpu``: gloo, ``cuda``: NCCL), started by torch's launcher."""

    def __init__(self, world_size: int, backend: str, pg_timeout: float = 1800.0) -> None:
        self.world_size = world_size
        self.backend = backend
        self.pg_timeout = pg_timeout
        self.ranks: dict[int, _Rank] = {}
        self.launcher: subprocess.Popen[bytes] | None = None
        self.directory = Path(tempfile.mkdtemp(prefix=f"gpuperf-pool-ws{world_size}-"))
        self.log_path = self.directory / "launcher.log"
        self.tests_run = 0
        self.start_seconds = 0.0
        #: Connections refused because the peer could not prove it holds the pool key.
        self.rejected_connections = 0

    @property
    def key(self) -> tuple[int, str]:
        """(world_size, backend): which tests this pool can run."""
        return (self.world_size, self.backend)

    @property
    def alive(self) -> bool:
        """True while the launcher runs and every rank is connected."""
        return self.launcher is not None and self.launcher.poll() is None and len(self.ranks) == self.world_size

    def pids(self) -> list[int]:
        """Process ids of the launcher and the ranks."""
        launcher = [self.launcher.pid] if self.launcher is not None else []
        return launcher + [r.pid for r in self.ranks.values()]

    def launcher_log(self, limit: int = 4000) -> str:
        """The tail of torchrun's (and the ranks' own) output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]

    def start(self, timeout: float = 300.0) -> None:
        """Launch the ranks and wait until each has joined the process group and connected back."""
        started = time.perf_counter()
        key = new_key()
        listener = AuthListener(key)
        env = process_env(
            {
                "GPUPERF_POOL_ADDR": listener.address,
                "GPUPERF_POOL_KEY": key.hex(),
                "GPUPERF_POOL_BACKEND": self.backend,
                "GPUPERF_POOL_PARENT": str(os.getpid()),
                "GPUPERF_POOL_DIR": str(self.directory),
                "GPUPERF_POOL_PG_TIMEOUT": str(self.pg_timeout),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            }
        )
        command = torchrun_command(self.world_size, "-m", "pytest_gpuperf.distributed.worker")
        with open(self.log_path, "wb") as log:
            self.launcher = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        try:
            deadline = time.monotonic() + timeout
            while len(self.ranks) < self.world_size:
                if self.launcher.poll() is not None:
                    raise PoolStartError(
                        f"torchrun exited with code {self.launcher.returncode} before all {self.world_size} "
                        f"ranks connected; its output:\n{self.launcher_log()}"
                    )
                if time.monotonic() > deadline:
                    raise PoolStartError(
                        f"{self.world_size} ranks did not connect within {timeout:.0f} s (raise "
                        "--gpuperf-dist-start-timeout if the machine is slow); torchrun's output:\n"
                        + self.launcher_log()
                    )
                conn = listener.accept(0.2)
                if conn is None:
                    continue
                if not conn.poll(10):  # authenticated: the hello is a pickle from one of our ranks
                    conn.close()
                    continue
                hello = conn.recv()
                self.ranks[int(hello["rank"])] = _Rank(int(hello["rank"]), int(hello["pid"]), conn)
        except BaseException:
            self.close(graceful=False)
            raise
        finally:
            self.rejected_connections += listener.rejected
            listener.close()
        self.start_seconds = time.perf_counter() - started

    def run(self, task: RankTask, timeout: float) -> PoolOutcome:
        """Run ``task`` on every rank; return within about ``timeout`` seconds whatever happens."""
        started = time.perf_counter()
        outcome = PoolOutcome()
        pending: dict[Connection, int] = {}
        for rank in self.ranks.values():
            try:
                rank.conn.send(("run", task))
                pending[rank.conn] = rank.rank
            except OSError:
                outcome.died.append(rank.rank)
        deadline = time.monotonic() + timeout
        error_deadline: float | None = None
        while pending and not outcome.died:
            now = time.monotonic()
            limit = deadline if error_deadline is None else min(deadline, error_deadline)
            if now >= limit:
                outcome.timed_out = now >= deadline
                break
            for conn in wait(list(pending), timeout=min(0.5, limit - now)):
                rank = pending.pop(conn)  # type: ignore[call-overload]
                try:
                    result: RankResult = conn.recv()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    outcome.died.append(rank)
                    continue
                outcome.results[rank] = result
                if result.status in (STATUS_ERROR, STATUS_OOM) and error_deadline is None:
                    error_deadline = time.monotonic() + ERROR_GRACE_SECONDS
            if self.launcher is not None and self.launcher.poll() is not None and pending:
                outcome.died.extend(r for r in pending.values() if r not in outcome.died)
                break
        outcome.hung = sorted(r for r in pending.values() if r not in outcome.died)
        if outcome.hung:
            outcome.stacks = self.dump_stacks(outcome.hung)
        if outcome.hung or outcome.died:
            time.sleep(0.2)
            outcome.launcher_log = self.launcher_log()
        outcome.seconds = time.perf_counter() - started
        self.tests_run += 1
        return outcome

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """All threads' Python stacks of ``ranks`` (faulthandler on SIGUSR1)."""
        offsets: dict[int, int] = {}
        for rank in ranks:
            path = self.directory / f"rank{rank}.stacks"
            offsets[rank] = path.stat().st_size if path.exists() else 0
            try:
                os.kill(self.ranks[rank].pid, signal.SIGUSR1)
            except (ProcessLookupError, KeyError):
                pass
        time.sleep(STACK_WAIT_SECONDS)
        stacks = {}
        for rank in ranks:
            path = self.directory / f"rank{rank}.stacks"
            try:
                with open(path, errors="replace") as handle:
                    handle.seek(offsets[rank])
                    stacks[rank] = handle.read().strip() or "(no stack written: the rank may be stuck outside Python)"
            except OSError as exc:
                stacks[rank] = f"(no stack: {exc})"
        return stacks

    def close(self, graceful: bool = True) -> None:
        """Stop the ranks (asking first when ``graceful``), then SIGKILL what is left; never leaves orphans."""
        if graceful and self.alive:
            for rank in self.ranks.values():
                try:
                    rank.conn.send(("stop",))
                except OSError:
                    pass
            try:
                assert self.launcher is not None
                self.launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for rank in self.ranks.values():
            _kill_group(rank.pid)
            try:
                rank.conn.close()
            except OSError:
                pass
        if self.launcher is not None:
            _kill_group(self.launcher.pid)
            try:
                self.launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.ranks.clear()


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (torchrun starts each rank in its own session), else the pid."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
