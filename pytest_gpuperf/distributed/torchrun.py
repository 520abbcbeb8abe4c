"""The ``gpuperf_torchrun`` fixture's runner: a script on N ranks via ``python -m torch.distributed.run``.

The script reports on ``GPUPERF {...}`` lines (see :mod:`.script_lines`) or with the
training-log ``Step | Loss | Peak VRAM/GPU`` lines; the runner turns them into metrics
(per-rank peak memory, the slowest rank's tokens/s, imbalance) and judges them
under an N-rank fingerprint. A script that outlives its timeout gets SIGABRT
(``PYTHONFAULTHANDLER=1`` prints every rank's stack), then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.distributed.env import process_env, torchrun_command, world_size_problem
from pytest_gpuperf.distributed.script_lines import ScriptReport, parse_output
from pytest_gpuperf.procs.guard import popen_guarded, stop_guarded
from pytest_gpuperf.procs.lifetime import descendants
from pytest_gpuperf.results import KIND_CUSTOM, KIND_MEMORY, KIND_THROUGHPUT, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.fixture import GpuPerf

OUTPUT_TAIL = 6000


@dataclass
class TorchrunResult:
    """One script run: exit code, output, what it reported, and the metrics recorded from it."""

    command: list[str]
    returncode: int
    output: str
    report: ScriptReport
    seconds: float
    metrics: list[Metric]


#: Seconds between two ranks' stack dumps when a script hangs (faulthandler writes one in a few milliseconds).
STACK_DUMP_GAP = 0.25


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def script_metrics(
    report: ScriptReport, name: str, imbalance_tolerance: float | None = None, judge_imbalance: bool = True
) -> list[Metric]:
    """Per-rank peak memory (judged), per-rank tokens/s (info), slowest rank's tokens/s and imbalance (judged unless
    ``judge_imbalance`` is false: ranks on host cores share them with each other, the launcher and every other job,
    so which rank the scheduler slows is not the code's doing; it is then recorded and shown)."""
    metrics: list[Metric] = []
    rates: dict[int, Metric] = {}
    for rank in sorted(report.ranks):
        rank_report = report.ranks[rank]
        if rank_report.peak_memory is not None:
            metrics.append(Metric(f"rank{rank}.{name}.peak_memory", rank_report.peak_memory, "B", "lower", KIND_MEMORY))
        if rank_report.tokens_per_s is not None:
            tokens = rank_report.extra.get("tokens_per_step")
            samples = [float(tokens) / t for t in rank_report.step_times if t > 0] if tokens else []
            rate = Metric(
                f"rank{rank}.{name}.tokens_per_s",
                rank_report.tokens_per_s,
                "tokens/s",
                "higher",
                KIND_THROUGHPUT,
                samples=samples,
                judged=False,
            )
            rates[rank] = rate
            metrics.append(rate)
    if not report.ranks and report.seed_peak_bytes is not None:
        metrics.append(Metric(f"rank0.{name}.peak_memory", report.seed_peak_bytes, "B", "lower", KIND_MEMORY))
    if rates:
        slow = min(rates, key=lambda r: float(rates[r].value))
        fast = max(rates, key=lambda r: float(rates[r].value))
        slowest = rates[slow]
        metrics.append(
            Metric(
                f"{name}.tokens_per_s",
                slowest.value,
                "tokens/s",
                "higher",
                KIND_THROUGHPUT,
                samples=list(slowest.samples),
                extra={"rank": slow},
            )
        )
        ratio = float(rates[fast].value) / float(slowest.value) if float(slowest.value) > 0 else 1.0
        metrics.append(
            Metric(
                f"{name}.imbalance",
                ratio,
                "x",
                "lower",
                KIND_CUSTOM,
                judged=judge_imbalance,
                tolerance=imbalance_tolerance,
            )
        )
    return metrics


class TorchrunRunner:
    """Runs scripts on N ranks for one test (the object the ``gpuperf_torchrun`` fixture returns)."""

    def __init__(self, item: pytest.Item, handle: GpuPerf | None, backend: str, timeout: float) -> None:
        self.item = item
        self.handle = handle
        self.backend = backend
        self.timeout = timeout
        self.results: list[TorchrunResult] = []
        #: The last script run's ranks' wait for a CPU (:func:`~pytest_gpuperf.distributed.rank_wait.wait_facts`).
        self._wait: dict[str, object] = {}

    def run(
        self,
        script: str | os.PathLike[str],
        *args: str,
        nproc_per_node: int,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
        record: bool = True,
    ) -> TorchrunResult:
        """Run ``script args`` on ``nproc_per_node`` ranks; fail the test on a non-zero exit or a timeout.

        The script gets torchrun's environment plus ``GPUPERF_BACKEND`` (``cpu``/``cuda``).
        With ``record`` its reported numbers are judged as ``rank<N>.<name>.peak_memory``,
        ``<name>.tokens_per_s`` (slowest rank) and ``<name>.imbalance``; ``name`` defaults
        to the script's stem.
        """
        problem = world_size_problem(self.backend, nproc_per_node)
        if problem is not None:
            pytest.skip(problem)
        path = self._script(script, name)
        command = torchrun_command(nproc_per_node, str(path), *map(str, args))
        limit = float(timeout or self.timeout)
        run_env = process_env({"GPUPERF_BACKEND": self.backend, "PYTHONFAULTHANDLER": "1", **(env or {})})
        stem = name or path.stem
        returncode, output, report, seconds = self._launch(command, run_env, limit, path, nproc_per_node)
        metrics = self._metrics(report, stem, self._wait)
        if record:
            if not metrics:
                pytest.fail(
                    f"{self.item.nodeid}: {path.name} printed no 'GPUPERF {{\"rank\": ...}}' line and no "
                    f"'Step N | Loss: x | Peak VRAM/GPU: y GB' line; print one per rank (see "
                    f"pytest_gpuperf.distributed.script_lines). Output:\n{output[-OUTPUT_TAIL:]}",
                    pytrace=False,
                )
            self._judge(
                metrics, stem, nproc_per_node, lambda: self._launch(command, run_env, limit, path, nproc_per_node)
            )
        result = TorchrunResult(command, returncode, output, report, seconds, metrics)
        self.results.append(result)
        return result

    def _script(self, script: str | os.PathLike[str], name: str | None) -> Path:
        """The script's path (relative ones from the rootdir); fails the test when it is missing or ``name`` (its
        stem by default) cannot name metrics."""
        from pytest_gpuperf.validate import MAX_METRIC_NAME, name_problem

        path = Path(script)
        if not path.is_absolute():
            path = Path(self.item.config.rootpath) / path
        if not path.exists():
            pytest.fail(f"{self.item.nodeid}: gpuperf_torchrun: script {path} does not exist", pytrace=False)
        problem = name_problem(name or path.stem, "name", MAX_METRIC_NAME - 40)
        if problem:
            pytest.fail(f"{self.item.nodeid}: gpuperf_torchrun.run(): {problem}", pytrace=False)
        return path

    def _metrics(self, report: ScriptReport, stem: str, wait: dict[str, object]) -> list[Metric]:
        """The script's metrics, with the host's calibration when the test measured one and, on a host CPU, how
        long its ranks waited for a CPU (``wait``: :func:`~pytest_gpuperf.distributed.rank_wait.wait_facts`)."""
        from pytest_gpuperf.distributed.judging import imbalance_tolerance, with_host_calibration

        host_cpu = self.handle is not None and self.handle.context.backend.is_host_cpu()
        scripted = script_metrics(report, stem, imbalance_tolerance(self.handle), judge_imbalance=not host_cpu)
        metrics = with_host_calibration(self.handle, scripted)
        for metric in metrics:
            if "calibration" in metric.extra:  # a wall-clocked timing on the host CPU
                metric.extra.update(wait)
        return metrics

    def _judge(
        self, metrics: list[Metric], stem: str, nproc: int, launch: Callable[[], tuple[int, str, ScriptReport, float]]
    ) -> None:
        """Judge the world's metrics; a suspected regression is measured again by ``launch`` (a second run)."""
        from pytest_gpuperf.distributed.judging import judge_world_metrics, second_opinion

        judge_world_metrics(self.item, self.handle, nproc, metrics)

        def again() -> dict[str, Metric]:
            _, _, more, _ = launch()
            return {m.name: m for m in self._metrics(more, stem, self._wait)}

        second_opinion(self.item, self.handle, again)

    def _launch(
        self, command: list[str], run_env: dict[str, str], limit: float, path: Path, nproc: int
    ) -> tuple[int, str, ScriptReport, float]:
        """One run of the script on ``nproc`` ranks; fails the test on a timeout or a non-zero exit."""
        from pytest_gpuperf.distributed.rank_wait import RankWait, wait_facts

        started = time.perf_counter()
        proc = popen_guarded(  # nothing it starts outlives pytest (see procs.guard)
            command,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(self.item.config.rootpath),
        )
        timed_out = False
        try:
            with RankWait(proc.pid) as waited:
                raw, _ = proc.communicate(timeout=limit)
            self._wait = wait_facts(waited.share())
        except subprocess.TimeoutExpired:
            timed_out = True
            raw = self._stop(proc)
        except BaseException:  # Ctrl-C, a failure in pytest: the script and its ranks go now
            stop_guarded(proc)
            raise
        output = raw.decode(errors="replace")
        seconds = time.perf_counter() - started
        if timed_out:
            pytest.fail(
                f"{self.item.nodeid}: {path.name} on {nproc} rank(s) did not finish within {limit:g} s "
                f"(pass timeout= to gpuperf_torchrun.run or raise gpuperf_dist_timeout); the ranks' stacks and "
                f"output:\n{output[-OUTPUT_TAIL:]}",
                pytrace=False,
            )
        if proc.returncode != 0:
            pytest.fail(
                f"{self.item.nodeid}: {path.name} on {nproc} rank(s) exited with code {proc.returncode}; "
                f"its output (torchrun names the failed rank):\n{output[-OUTPUT_TAIL:]}",
                pytrace=False,
            )
        return proc.returncode, output, parse_output(output), seconds

    def _stop(self, proc: subprocess.Popen[bytes]) -> bytes:
        """Dump the ranks' stacks (SIGABRT + faulthandler), then kill the launcher and every rank."""
        ranks = descendants(proc.pid)
        began = time.monotonic()
        # One at a time, the deepest first (the ranks before their launcher, whose abort would end them undumped):
        # dumps written at once interleave character by character in the output.
        for pid in reversed(ranks):
            _signal_all([pid], signal.SIGABRT)
            time.sleep(STACK_DUMP_GAP)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
        stop_guarded(proc)
        try:
            raw, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            raw = b""
        return raw
