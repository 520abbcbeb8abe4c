"""The measuring loop: warm-up, adaptive repetitions, device-correct timing, drift reference.

Each *sample* is ``iters`` back-to-back calls of the step divided by ``iters``,
where ``iters`` is chosen so one sample lasts at least ``min_sample_time`` (so
timer resolution and launch jitter do not dominate short steps). How a sample is
timed (``TimingResult.method``):

* ``events``: the backend's ``time_block`` (CUDA events on CUDA; synchronize + host clock elsewhere);
* ``thread_cpu``: on the CPU backend with one intra-op thread, the calling thread's CPU time, so slices
  the scheduler gave to other processes are not counted (``cpu_clock``);
* ``cuda_graph``: on CUDA, steps shorter than ``graph_threshold`` are captured ``iters`` times into a
  CUDA graph whose replays are timed, so launch overhead does not swamp them (fallback: ``events``);
* ``l2_flush``: with ``l2_flush``, each call follows a write of a buffer larger than the cache and is
  timed alone.

Sampling stops at the first of (``TimingResult.stop``):

* ``decided``: a :class:`~pytest_gpuperf.decision.StopRule` (the baseline and tolerance) says the
  uncertainty is small enough to decide (like nvbench's noise criterion, but against the baseline);
* ``precise``: no baseline to decide against, and the judged quantile's 95% half-width is below
  ``target_precision``;
* ``max_samples``; or ``budget``: ``max_time`` ran out (reported as ``budget_exhausted`` when undecided).

The judged statistic is the :data:`STAT_QUANTILE` quantile of the samples (``TimingResult.typical``).
When a reference workload is given (a :class:`~pytest_gpuperf.reference.Probe`), one reference sample
is timed right after each step sample; ``normalized`` holds the step samples divided by the run's
reference quantile, which cancels drift of the machine's speed between runs (see
:mod:`pytest_gpuperf.compare`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pytest_gpuperf.stats import STAT_QUANTILE, median, quantile, quantile_precision, spread_subset  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

GRAPH_MODES = ("auto", "on", "off")
CPU_CLOCKS = ("auto", "thread", "wall")


@dataclass(frozen=True)
class MeasureConfig:
    """Knobs of the measuring loop (from ini, command line or the test's marker)."""

    warmup_time: float = 0.05
    min_warmup_calls: int = 2
    min_sample_time: float = 0.002
    min_samples: int = 30
    max_samples: int = 200
    max_time: float = 2.0
    target_precision: float = 0.01
    use_reference: bool = True
    l2_flush: bool = False
    cuda_graph: str = "auto"
    graph_threshold: float = 100e-6
    cpu_clock: str = "auto"


@dataclass
class TimingResult:
    """What the loop observed: per-step times, drift-normalized ratios and how it got them."""

    samples: list[float]
    normalized: list[float] = field(default_factory=list)
    reference_samples: list[float] = field(default_factory=list)
    iters_per_sample: int = 1
    warmup_calls: int = 0
    elapsed: float = 0.0
    budget_exhausted: bool = False
    precision: float = float("nan")
    method: str = "events"
    method_note: str = ""
    reference: str = ""
    stop: str = ""

    @property
    def median(self) -> float:
        """Median seconds per step."""
        return median(self.samples)

    @property
    def typical(self) -> float:
        """The judged statistic: the :data:`STAT_QUANTILE` quantile of seconds per step."""
        return quantile(self.samples, STAT_QUANTILE)

    def renormalize(self) -> None:
        """``normalized`` = each step sample / the run's reference quantile (drift of the whole run cancels)."""
        if self.reference_samples:
            ref = quantile(self.reference_samples, STAT_QUANTILE)
            self.normalized = [s / ref for s in self.samples] if ref > 0 else []

    def summary(self) -> dict[str, object]:
        """JSON-able facts about how the timing was taken (for a metric's ``extra``)."""
        out: dict[str, object] = {
            "iters_per_sample": self.iters_per_sample,
            "precision": self.precision,
            "budget_exhausted": self.budget_exhausted,
            "method": self.method,
            "stop": self.stop,
            "measure_seconds": round(self.elapsed, 4),
        }
        if self.reference:
            out["reference"] = self.reference
        if self.method_note:
            out["method_note"] = self.method_note
        return out


class StopCheck(Protocol):
    """Says whether the samples so far suffice to decide against the baseline."""

    def decided(self, result: TimingResult) -> bool:
        """True when more samples would not change the decision."""
        ...


def _calibrate(time_iters: Callable[[int], float], min_sample_time: float) -> tuple[int, float]:
    """Iterations per sample so that one sample lasts at least ``min_sample_time``; also seconds per call."""
    iters = 1
    while True:
        elapsed = time_iters(iters)
        if elapsed >= min_sample_time or iters >= 1 << 20:
            return iters, elapsed / iters
        if elapsed <= 0:
            iters *= 10
        else:
            iters = max(iters + 1, math.ceil(iters * min_sample_time * 1.2 / elapsed))


TimeBlock = Callable[[Callable[[], object], int], float]


def thread_time_block(step: Callable[[], object], iters: int) -> float:
    """CPU seconds the calling thread spent in ``iters`` calls (time other processes took is not counted)."""
    start = time.thread_time()
    for _ in range(iters):
        step()
    return time.thread_time() - start


def block_timer(backend: Backend, config: MeasureConfig) -> tuple[TimeBlock, str]:
    """The clock of the loop: the backend's ``time_block``, or the thread's CPU time on a one-thread CPU.

    On a CPU shared with other jobs, wall time counts the slices the scheduler gave
    to them; with one intra-op thread every op of the step runs in the calling
    thread, so its CPU time is the step's own cost (``cpu_clock``: auto, thread, wall).
    """
    if backend.name == "cpu" and config.cpu_clock != "wall":
        import torch

        if config.cpu_clock == "thread" or torch.get_num_threads() == 1:
            return thread_time_block, "thread_cpu"
    return backend.time_block, "events"


def _sampler(
    backend: Backend, step: Callable[[], object], config: MeasureConfig, result: TimingResult, timer: TimeBlock
) -> tuple[Callable[[], float], Callable[[], None]]:
    """Choose the timing method; return (take one per-call sample, release resources)."""
    if config.l2_flush and backend.runs_torch:
        from pytest_gpuperf.l2_flush import L2Flusher, time_flushed

        flusher = L2Flusher(backend.device())
        iters, _ = _calibrate(lambda n: time_flushed(timer, step, n, flusher), config.min_sample_time)
        result.iters_per_sample, result.method = iters, "l2_flush"
        return (lambda: time_flushed(timer, step, iters, flusher) / iters), (lambda: None)
    iters, per_call = _calibrate(lambda n: timer(step, n), config.min_sample_time)
    result.iters_per_sample = iters
    short = per_call < config.graph_threshold or config.cuda_graph == "on"
    if backend.name == "cuda" and config.cuda_graph != "off" and short:
        from pytest_gpuperf.cuda_graph import capture

        graph, reason = capture(step, iters)
        if graph is not None:
            result.method, result.iters_per_sample = "cuda_graph", graph.iters
            return (lambda: graph.time() / graph.iters), graph.close
        result.method_note = f"CUDA graph capture failed ({reason}); timed event loops instead"
    return (lambda: timer(step, iters) / iters), (lambda: None)


def measure_time(
    backend: Backend,
    step: Callable[[], object],
    config: MeasureConfig,
    reference: Callable[[], object] | None = None,
    stop_rule: StopCheck | None = None,
) -> TimingResult:
    """Warm up, then sample the step (interleaved with ``reference`` when given) adaptively.

    ``stop_rule`` (built from the baseline and tolerance) ends sampling as soon as the
    verdict is clear; without it sampling stops at ``target_precision``.
    """
    started = time.perf_counter()
    timer, clock = block_timer(backend, config)
    result = TimingResult(samples=[], method=clock)
    while result.warmup_calls < config.min_warmup_calls or time.perf_counter() - started < config.warmup_time:
        timer(step, 1)
        result.warmup_calls += 1
        if time.perf_counter() - started > config.max_time / 2:
            break
    take_sample, release = _sampler(backend, step, config, result, timer)
    ref_iters = 0
    if reference is not None and config.use_reference:
        result.reference = str(getattr(reference, "name", "reference"))
        timer(reference, 1)
        ref_iters, _ = _calibrate(lambda n: timer(reference, n), config.min_sample_time / 2)
    loop_start = time.perf_counter()
    try:
        while True:
            sample = take_sample()
            result.samples.append(sample)
            if ref_iters:
                ref = timer(reference, ref_iters) / ref_iters  # type: ignore[arg-type]
                result.reference_samples.append(ref)
                result.renormalize()
            n = len(result.samples)
            if n >= config.min_samples:
                result.precision = quantile_precision(result.samples)
                if stop_rule is not None and stop_rule.decided(result):
                    result.stop = "decided"
                elif stop_rule is None and result.precision <= config.target_precision:
                    result.stop = "precise"
                elif n >= config.max_samples:
                    result.stop = "max_samples"
                if result.stop:
                    break
            if time.perf_counter() - loop_start > config.max_time:
                result.stop = "budget"
                result.precision = quantile_precision(result.samples)
                result.budget_exhausted = True  # undecided (or imprecise) when the time ran out
                break
    finally:
        release()
    result.elapsed = time.perf_counter() - started
    return result
