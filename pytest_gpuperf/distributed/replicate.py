"""Run a perf test again in fresh worker processes and get back what it measured there.

API (call it while the test runs, from its call phase: its fixture values are shipped)::

    from pytest_gpuperf.distributed.replicate import ReplicaError, ReplicaRun, run_in_fresh_processes

    runs: list[ReplicaRun] = run_in_fresh_processes(item, processes=1, timeout=None)
    for run in runs:
        run.ok            # True when the body ran to the end there
        run.metrics       # list[Metric]: every metric measure()/record() produced there, not judged
        run.metric_dicts()  # the same as plain dicts (name, value, unit, better, kind, samples, extra)
        run.by_name()     # {metric name: Metric}
        run.status, run.error, run.pid, run.seconds, run.stdout, run.stderr

* ``item``: the running ``pytest.Function`` (a module-level test, or a method of a test class, which
  runs on a fresh instance with its ``setup_method``/``teardown_method``; its fixture values and parameters
  must pickle: they travel to the worker, the way the rank pool ships them). Only the values of the
  test's own arguments travel: side effects of fixtures (an autouse fixture that sets a default dtype
  or an environment variable) do not happen in the worker;
* ``processes``: how many fresh processes run it, one after another (never in parallel: they would
  contend for the device). Each is a process that has **not run this test before** (it may have run
  other tests: workers are kept and reused across tests, so ``gpuperf_processes = N`` costs N-1
  process starts per session, not per test);
* ``timeout``: seconds per run (default ``gpuperf_dist_timeout``); a hung run comes back with
  status ``"hung"`` and its stacks in ``error``, a worker that died with ``"died"`` and its last output.

The worker measures with the pytest process's settings (``gpuperf_max_time`` ...), the same
``GpuPerf.measure`` code and no lockstep, on the test's backend. Raises :class:`ReplicaError`
(with the reason) when the test cannot be replicated at all: not under ``--gpuperf``, an
argument that does not pickle, a distributed test, or a worker that did
not start. Workers are ``python -m pytest_gpuperf.distributed.worker`` processes of a solo
:class:`~pytest_gpuperf.distributed.pool.RankPool` (no torchrun, no process group), stopped at
the end of the session; a worker that failed a run is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.distributed.tasks import BodyRun
from pytest_gpuperf.keys import REPLICAS_KEY

if TYPE_CHECKING:
    from pytest_gpuperf.distributed.pool import PoolOutcome, RankPool
    from pytest_gpuperf.distributed.tasks import RankTask
    from pytest_gpuperf.results import Metric


class ReplicaError(RuntimeError):
    """The test cannot be run in another process at all (the message says why)."""


@dataclass
class ReplicaRun(BodyRun):
    """One run of a test body in a fresh worker process."""

    pid: int
    status: str
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the body ran to its end in the worker (its metrics are complete)."""
        return self.status == "ok"

    def by_name(self) -> dict[str, Metric]:
        """The run's metrics by name (``step.time``, ``step.peak_memory`` ...)."""
        return {metric.name: metric for metric in self.metrics}

    def metric_dicts(self) -> list[dict[str, Any]]:
        """The run's metrics as plain dicts."""
        return [
            {
                "name": m.name,
                "value": m.value,
                "unit": m.unit,
                "better": m.better,
                "kind": m.kind,
                "samples": list(m.samples),
                "extra": dict(m.extra),
            }
            for m in self.metrics
        ]


@dataclass
class _Worker:
    pool: RankPool
    ran: set[str] = field(default_factory=set)


@dataclass
class ReplicaPool:
    """Solo worker processes per backend, kept across tests; each test runs at most once per worker."""

    start_timeout: float = 300.0
    workers: list[_Worker] = field(default_factory=list)
    started: int = 0
    runs: int = 0
    #: ``node id: status: last line of the error`` of each run that did not finish (for the session summary).
    failures: list[str] = field(default_factory=list)
    _keep: dict[str, int] = field(default_factory=dict)

    def run(self, task: RankTask, processes: int, timeout: float) -> list[ReplicaRun]:
        """Run ``task`` once in each of ``processes`` workers that have not run it; start workers as needed."""
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._keep[task.backend] = max(self._keep.get(task.backend, 0), processes)
        runs = []
        for _ in range(processes):
            worker = self._fresh_worker(task)
            outcome = worker.pool.run(task, timeout)
            worker.ran.add(task.node_id)
            self.runs += 1
            runs.append(_replica_run(worker.pool, outcome, timeout))
            if not runs[-1].ok:
                self.failures.append(f"{task.node_id}: {runs[-1].status}: {last_line(runs[-1].error)}")
            if outcome.broken or not worker.pool.alive:
                self._drop(worker)
        self._trim(task.backend)
        return runs

    def _fresh_worker(self, task: RankTask) -> _Worker:
        from pytest_gpuperf.distributed.pool import PoolStartError, RankPool

        for worker in [w for w in self.workers if not w.pool.alive]:  # killed by a fault or Ctrl-C
            self._drop(worker)
        for worker in self.workers:
            if worker.pool.backend == task.backend and task.node_id not in worker.ran:
                return worker
        pool = RankPool(1, task.backend, solo=True)
        try:
            pool.start(self.start_timeout)
        except PoolStartError as exc:
            raise ReplicaError(
                f"{task.node_id}: a fresh worker process on {task.backend} did not start: {exc}"
            ) from None
        self.started += 1
        worker = _Worker(pool)
        self.workers.append(worker)
        return worker

    def _drop(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        worker.pool.close(graceful=False)

    def _trim(self, backend: str) -> None:
        """Keep no more workers of ``backend`` than the most processes one call asked for."""
        mine = [w for w in self.workers if w.pool.backend == backend]
        for worker in mine[: max(0, len(mine) - self._keep.get(backend, 0))]:
            self.workers.remove(worker)
            worker.pool.close()

    def close(self, graceful: bool = True) -> None:
        """Stop every worker (SIGKILL what does not stop)."""
        workers, self.workers = self.workers, []
        for worker in workers:
            worker.pool.close(graceful=graceful)


def last_line(error: str) -> str:
    """The last non-empty line of an error text (a traceback's exception line), at most 200 characters."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def _replica_run(pool: RankPool, outcome: PoolOutcome, timeout: float) -> ReplicaRun:
    """What one worker's outcome says: its metrics, or why there are none."""
    pid = pool.ranks[0].pid if 0 in pool.ranks else (pool.launcher.pid if pool.launcher else 0)
    out, err = outcome.output.get(0, ("", ""))
    result = outcome.results.get(0)
    if result is not None:
        return ReplicaRun(
            pid,
            result.status,
            result.traceback,
            metrics=list(result.metrics),
            seconds=result.seconds,
            stdout=out,
            stderr=err,
        )
    if outcome.hung:
        stacks = outcome.stacks.get(0, "")
        return ReplicaRun(
            pid,
            "hung",
            error=f"did not finish within {timeout:g} s; its stacks:\n{stacks}",
            stdout=out,
            stderr=err,
            seconds=outcome.seconds,
        )
    from pytest_gpuperf.procs.lifetime import describe_exit

    log = outcome.launcher_log
    how = describe_exit(pool.launcher) if pool.solo else ""  # a solo pool's launcher is the worker itself
    return ReplicaRun(
        pid,
        "died",
        error=f"the worker died without reporting{f' ({how})' if how else ''}; its output:\n{out}{err}{log}",
        stdout=out,
        stderr=err,
        seconds=outcome.seconds,
    )


def replica_pool(config: pytest.Config) -> ReplicaPool:
    """The session's replica workers (created on first use, stopped at session end)."""
    from pytest_gpuperf.settings import get_option

    pool = config.stash.get(REPLICAS_KEY, None)
    if pool is None:
        pool = ReplicaPool(start_timeout=float(get_option(config, "gpuperf_dist_start_timeout")))
        config.stash[REPLICAS_KEY] = pool
    return pool


def run_in_fresh_processes(item: pytest.Item, processes: int = 1, *, timeout: float | None = None) -> list[ReplicaRun]:
    """Run the running test ``item`` again in ``processes`` fresh worker processes; their metrics (see module doc)."""
    from pytest_gpuperf.distributed.runner import TaskError, task_for
    from pytest_gpuperf.keys import SESSION_KEY
    from pytest_gpuperf.settings import get_option

    if not isinstance(item, pytest.Function):
        raise ReplicaError(f"{item.nodeid}: only Python test functions can be replicated")
    if item.get_closest_marker("gpuperf_distributed") is not None:
        raise ReplicaError(
            f"{item.nodeid}: distributed tests are not replicated in fresh processes (they run on ranks)"
        )
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None:
        raise ReplicaError(f"{item.nodeid}: replicating a test needs --gpuperf (smoke mode measures nothing)")
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    if not item.funcargs or "gpuperf_backend" not in params:
        raise ReplicaError(
            f"{item.nodeid}: only a running perf test (one that uses the gpuperf fixture) can be replicated"
        )
    backend = str(params["gpuperf_backend"])
    try:
        task = task_for(item, backend, session.settings, lockstep=False)
    except TaskError as exc:
        raise ReplicaError(str(exc)) from None
    limit = float(timeout if timeout is not None else get_option(item.config, "gpuperf_dist_timeout"))
    return replica_pool(item.config).run(task, processes, limit)
