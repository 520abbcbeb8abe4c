"""A pool of worker processes of one world size, started once and reused across tests.

The pytest process listens on a local socket; ``python -m torch.distributed.run
--standalone --nproc_per_node N -m pytest_gpuperf.distributed.worker`` starts the
ranks (or, with ``solo=True``, ``python -m pytest_gpuperf.distributed.worker`` starts one
worker without a process group: the fresh processes of :mod:`.replicate`). Each worker
connects back, proving it holds the pool's random key before anything is unpickled
(:mod:`.channel`: another local process that connects to the port is refused unread).
A test is sent to every rank, each answers with a :class:`RankResult`. Faults end the pool:

* a rank raised: the others get a short grace period to finish (they may be
  waiting in a collective the failed rank never entered);
* nothing came back within the timeout: all threads' stacks of the stuck ranks
  are dumped (``faulthandler`` on SIGUSR1) into the outcome;
* a rank died (OOM killer, segfault, ``os._exit``): its own output and the launcher's say how.

Every rank's stdout and stderr go to files in the pool's folder (``rank<N>.out``,
``rank<N>.err``); the parent reads each test's part of them, so output printed just before
a rank dies is kept. The caller then :meth:`RankPool.close` s the pool (SIGKILL to every
rank's process group, the launcher and what it started, folder removed) and the next test starts a
fresh one. The launcher (torchrun, or the solo worker) starts under the floor's guard
(:mod:`pytest_gpuperf.procs.guard`). Ctrl-C while a test runs kills the pool at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from pytest_gpuperf.distributed.channel import AuthListener, new_key, recv_message, send_message
from pytest_gpuperf.distributed.env import process_env, torchrun_command
from pytest_gpuperf.distributed.tasks import STATUS_ERROR, STATUS_OOM, RankResult, RankTask
from pytest_gpuperf.procs.folders import make_pool_dir, remove_pool_dir
from pytest_gpuperf.procs.guard import popen_guarded, stop_guarded
from pytest_gpuperf.procs.lifetime import kill_group, process_start_time

ERROR_GRACE_SECONDS = 3.0
STACK_WAIT_SECONDS = 1.0
#: How long an idle pool asked to stop may take before it is killed.
STOP_WAIT_SECONDS = 10.0
#: The most of one rank's output (per stream, per test) kept as evidence.
OUTPUT_LIMIT = 20_000


class PoolStartError(RuntimeError):
    """The ranks did not all connect back (the message carries the launcher's output)."""


@dataclass
class PoolOutcome:
    """What came back for one test: per-rank results, the faults seen, and every rank's output."""

    results: dict[int, RankResult] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    died: list[int] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    output: dict[int, tuple[str, str]] = field(default_factory=dict)
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
    """``world_size`` ranks on ``backend`` (``cpu``: gloo, ``cuda``: NCCL), started by torch's launcher.

    ``solo=True``: one worker process started directly, without torchrun or a process group.
    """

    def __init__(self, world_size: int, backend: str, pg_timeout: float = 1800.0, solo: bool = False) -> None:
        if solo and world_size != 1:
            raise ValueError("a solo pool has exactly one worker")
        self.world_size = world_size
        self.backend = backend
        self.pg_timeout = pg_timeout
        self.solo = solo
        self.ranks: dict[int, _Rank] = {}
        self.launcher: subprocess.Popen[bytes] | None = None
        self.directory = make_pool_dir("solo" if solo else f"ws{world_size}")
        self.log_path = self.directory / "launcher.log"
        self.tests_run = 0
        self.start_seconds = 0.0
        #: Connections refused because the peer could not prove it holds the pool key.
        self.rejected_connections = 0
        self._closed = False

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
        return launcher + [r.pid for r in self.ranks.values() if r.pid not in launcher]

    def launcher_log(self, limit: int = 4000) -> str:
        """The tail of torchrun's own output (the ranks write to their own files)."""
        return _tail(self.log_path, 0, limit)

    def output_path(self, rank: int, stream: str) -> Path:
        """Where rank ``rank`` writes its ``stdout`` or ``stderr``."""
        return self.directory / f"rank{rank}.{'out' if stream == 'stdout' else 'err'}"

    def output_offsets(self) -> dict[int, tuple[int, int]]:
        """Current sizes of every rank's output files: what a test printed starts there."""
        return {
            rank: (_size(self.output_path(rank, "stdout")), _size(self.output_path(rank, "stderr")))
            for rank in range(self.world_size)
        }

    def read_output(self, offsets: dict[int, tuple[int, int]]) -> dict[int, tuple[str, str]]:
        """Each rank's stdout and stderr written since ``offsets`` (the tail, when long)."""
        return {
            rank: (
                _tail(self.output_path(rank, "stdout"), out, OUTPUT_LIMIT),
                _tail(self.output_path(rank, "stderr"), err, OUTPUT_LIMIT),
            )
            for rank, (out, err) in offsets.items()
        }

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
                "GPUPERF_POOL_PARENT_START": process_start_time(os.getpid()),
                "GPUPERF_POOL_DIR": str(self.directory),
                "GPUPERF_POOL_PG_TIMEOUT": str(self.pg_timeout),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
                "PYTHONUNBUFFERED": "1",  # a rank's last words reach its file before os._exit or SIGKILL
                **({"GPUPERF_POOL_SOLO": "1"} if self.solo else {}),
            }
        )
        if self.solo:
            command = [sys.executable, "-m", "pytest_gpuperf.distributed.worker"]
        else:
            command = torchrun_command(self.world_size, "-m", "pytest_gpuperf.distributed.worker")
        what = "the worker" if self.solo else "torchrun"
        with open(self.log_path, "wb") as log:  # under the floor's guard: nothing it starts outlives pytest
            self.launcher = popen_guarded(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            deadline = time.monotonic() + timeout
            while len(self.ranks) < self.world_size:
                if self.launcher.poll() is not None:
                    raise PoolStartError(
                        f"{what} exited with code {self.launcher.returncode} before all {self.world_size} "
                        f"rank(s) connected; its output:\n{self._start_evidence()}"
                    )
                if time.monotonic() > deadline:
                    raise PoolStartError(
                        f"{self.world_size} rank(s) did not connect within {timeout:.0f} s (raise "
                        f"the ini key gpuperf_dist_start_timeout if the machine is slow); {what}'s output:\n"
                        + self._start_evidence()
                    )
                conn = listener.accept(0.2)
                if conn is None:
                    continue
                if not conn.poll(10):  # authenticated: the hello is a pickle from one of our ranks
                    conn.close()
                    continue
                hello: dict = recv_message(conn)  # type: ignore[assignment]
                self.ranks[int(hello["rank"])] = _Rank(int(hello["rank"]), int(hello["pid"]), conn)
        except BaseException:
            self.close(graceful=False)
            raise
        finally:
            self.rejected_connections += listener.rejected
            listener.close()
        self.start_seconds = time.perf_counter() - started

    def _start_evidence(self) -> str:
        parts = [self.launcher_log()]
        for rank, (out, err) in self.read_output({r: (0, 0) for r in range(self.world_size)}).items():
            if out.strip() or err.strip():
                parts.append(f"--- rank {rank} ---\n{out}{err}")
        return "\n".join(p for p in parts if p)

    def run(self, task: RankTask, timeout: float) -> PoolOutcome:
        """Run ``task`` on every rank; return within about ``timeout`` seconds whatever happens.

        Ctrl-C (or any other exception) while waiting kills the pool before it propagates.
        """
        try:
            return self._run(task, timeout)
        except BaseException:
            self.close(graceful=False)
            raise

    def _run(self, task: RankTask, timeout: float) -> PoolOutcome:
        started = time.perf_counter()
        outcome = PoolOutcome()
        offsets = self.output_offsets()
        pending: dict[Connection, int] = {}
        for rank in self.ranks.values():
            try:
                send_message(rank.conn, ("run", task))
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
                    result: RankResult = recv_message(conn)  # type: ignore[arg-type, assignment]
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
        outcome.output = self.read_output(offsets)
        for rank, (out, err) in outcome.output.items():
            if rank in outcome.results:
                outcome.results[rank].stdout, outcome.results[rank].stderr = out, err
        outcome.seconds = time.perf_counter() - started
        self.tests_run += 1
        return outcome

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """All threads' Python stacks of ``ranks`` (faulthandler on SIGUSR1)."""
        offsets: dict[int, int] = {}
        for rank in ranks:
            offsets[rank] = _size(self.directory / f"rank{rank}.stacks")
            try:
                os.kill(self.ranks[rank].pid, signal.SIGUSR1)
            except (ProcessLookupError, KeyError):
                pass
        time.sleep(STACK_WAIT_SECONDS)
        stacks = {}
        for rank in ranks:
            text = _tail(self.directory / f"rank{rank}.stacks", offsets[rank], OUTPUT_LIMIT).strip()
            stacks[rank] = text or "(no stack written: the rank may be stuck outside Python)"
        return stacks

    def close(self, graceful: bool = True) -> None:
        """Stop the ranks (asking first when ``graceful``), SIGKILL what is left, remove the folder; no orphans."""
        if graceful and self.alive:
            for rank in self.ranks.values():
                try:
                    send_message(rank.conn, ("stop",))
                except OSError:
                    pass
            try:
                assert self.launcher is not None
                self.launcher.wait(timeout=STOP_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        for rank in self.ranks.values():
            kill_group(rank.pid)
            try:
                rank.conn.close()
            except OSError:
                pass
        if self.launcher is not None:
            stop_guarded(self.launcher)  # its group, its descendants, what carries its token; then reaped
        self.ranks.clear()
        if not self._closed:
            self._closed = True
            remove_pool_dir(self.directory)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, offset: int, limit: int) -> str:
    """The text of ``path`` from ``offset`` on, cut to its last ``limit`` characters ("" when unreadable)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]
