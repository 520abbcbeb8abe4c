"""The measuring loop: steady-state warm-up, budgeted sampling, device time on CUDA, contention guard.

Phases of :func:`measure_time`, all inside ``max_time`` (one call of a step
longer than the budget is still made, so a slow step costs about two calls):

1. **Warm-up** (:mod:`pytest_gpuperf.timing.warmup`): at least ``warmup_time`` and ``warmup_calls`` calls, then
   until the step's recent calls stop trending, at most ``warmup_share`` of the budget; a step that never
   settles is flagged (``settled=False``). The warm-up also calibrates the iterations per sample (no separate
   calibration calls) and, on the CPU's thread clock, detects a step that blocks (sleeps, waits for I/O,
   threads or a collective): that step is timed by the wall clock.
2. **Sampling**: each *sample* is ``iters`` back-to-back calls divided by ``iters`` (one sample lasts at least
   ``min_sample_time``). Samples the measuring thread spent waiting for a CPU are retaken (bounded) by a
   :class:`~pytest_gpuperf.timing.contention.ContentionGuard`; its summary goes into the record's instruments
   (``TimingResult.contention``).
   On the CPU a spacer of random size is held around each sample (:mod:`pytest_gpuperf.timing.layout`), so the
   step's buffers do not keep one layout (4K aliasing made whole processes 7x slower) for the whole process.
   Sampling stops at the first of (``TimingResult.stop``): ``decided`` (the baseline's
   :class:`~pytest_gpuperf.decision.StopRule` says more samples would not change the verdict), ``precise``
   (no baseline; the judged quantile's 95% half-width is below ``target_precision``), ``max_samples``, or
   ``budget`` (``budget_exhausted`` when undecided) -- but never before :data:`MIN_SAMPLES_FLOOR` samples
   unless one sample is a third of the budget.

How the judged samples are timed (``TimingResult.method``):

* ``thread_cpu``: the CPU backend with one intra-op thread (the default, ``cpu_threads``): the calling
  thread's CPU time, so slices the scheduler gave to other processes are not counted;
* ``wall``: a CPU step found blocking on the thread clock, timed by the wall clock (``method_note`` says why);
* ``events``: the backend's ``time_block`` (sync + host clock on the CPU, device events elsewhere);
* ``cuda_graph`` / ``cupti``: on CUDA, the GPU's own time per step (:mod:`pytest_gpuperf.timing.cuda.device_time`):
  replay of a CUDA graph of the whole step, else the sum of its kernels' durations; the eager per-step time
  (events around eager calls) is kept beside it (``eager_samples``, ``host_overhead``, ``host_bound``);
* ``l2_flush``: with ``l2_flush``, each call follows a write of a buffer larger than the cache, timed alone.

With ``lockstep`` (the distributed lockstep loop, where every rank must make the same calls) the
warm-up is exactly ``min_warmup_calls`` calls, no sample is retaken and no profiler is started.

The judged statistic is the :data:`STAT_QUANTILE` quantile of the samples (``TimingResult.typical``). The record
is filled inside this package only (the loop, its stop criterion, the instruments) and returned finished: read-only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_gpuperf.stats import STAT_QUANTILE, median, quantile, quantile_precision, spread_subset  # noqa: F401
from pytest_gpuperf.timing.contention import ContentionGuard, thread_wait_reader
from pytest_gpuperf.timing.sampling import (  # noqa: F401 (re-exported: the loop's public vocabulary)
    BLOCKING_SHARE,
    CPU_CLOCKS,
    GRAPH_MODES,
    HOST_BOUND_SHARE,
    LAYOUT,
    MIN_SAMPLES_FLOOR,
    MeasureConfig,
    SamplingPlan,
    StopCheck,
    TimingResult,
    counted,
    ramp_in_warmup,
    sample_floor,
    sample_loop,
)
from pytest_gpuperf.timing.warmup import WarmupResult, iters_for, warm_up

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

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


def new_guard(config: MeasureConfig) -> ContentionGuard:
    """The contention guard of one measurement (no retakes when ranks must agree on every count)."""
    return ContentionGuard(limit=config.wait_share_limit, max_retakes=0 if counted(config) else config.min_samples)


def _warm(backend: Backend, step: Callable[[], object], config: MeasureConfig, timer: TimeBlock) -> WarmupResult:
    min_time = ramp_in_warmup(backend.name, config)
    budget = math.inf if counted(config) else max(min_time, config.warmup_share * config.max_time)
    return warm_up(
        lambda: timer(step, 1),
        min_time=min_time,
        min_calls=max(config.min_warmup_calls, config.warmup_calls),
        budget=budget,
        tolerance=config.settle_tolerance,
        cpu_now=time.thread_time if backend.name == "cpu" else None,
        wait_ns=thread_wait_reader(),
        fixed_calls=config.min_warmup_calls if counted(config) else None,
    )


def blocking_note(cpu_share: float) -> str:
    """The ``method_note`` of a CPU step timed by the wall clock because it blocks."""
    return (
        f"the step blocks: its thread computed for {cpu_share:.1%} of the warm-up's wall time "
        "(sleep, I/O, worker threads or a collective); timed by the wall clock, which counts the waiting"
    )


def measure_time(
    backend: Backend,
    step: Callable[[], object],
    config: MeasureConfig,
    stop_rule: StopCheck | None = None,
) -> TimingResult:
    """Warm up until steady, then sample ``step`` within ``config.max_time`` (see the module doc).

    ``stop_rule`` (built from the baseline and tolerance) ends sampling as soon as the verdict is clear;
    without it sampling stops at ``target_precision``.
    """
    from pytest_gpuperf.backends.cpu_threads import measuring_threads

    started = time.perf_counter()
    threads = config.cpu_threads if backend.name == "cpu" else 0
    with measuring_threads(threads) as running:
        result = _measure(backend, step, config, stop_rule, started)
        if backend.name == "cpu":
            result.cpu_threads = running
    return result.finish(time.perf_counter() - started)


def _measure(
    backend: Backend, step: Callable[[], object], config: MeasureConfig, stop_rule: StopCheck | None, started: float
) -> TimingResult:
    timer, clock = block_timer(backend, config)
    warm = _warm(backend, step, config, timer)
    result = TimingResult(samples=[], method=clock, warmup=warm)
    per_call = warm.per_call
    if clock == "thread_cpu" and warm.cpu_share is not None and warm.cpu_share < BLOCKING_SHARE:
        if config.cpu_clock == "auto":
            timer, result.method, per_call = backend.time_block, "wall", 0.0
            result.method_note = blocking_note(warm.cpu_share)
        else:
            result.method_note = (
                f"the step blocks (its thread computed for {warm.cpu_share:.1%} of the wall time) but "
                "gpuperf_cpu_clock=thread counts only its CPU time: waiting is not in these numbers"
            )
    iters = iters_for(per_call, warm.wall_per_call, config.min_sample_time)
    result.iters_per_sample = iters
    deadline = math.inf if counted(config) else started + config.max_time
    floor = sample_floor(config, max(per_call, warm.wall_per_call) * iters)
    if floor == 1:
        note = f"one call ({warm.wall_per_call:.3g} s) is over a third of the {config.max_time:g} s budget"
        result.method_note = "; ".join(filter(None, [result.method_note, note]))
    with new_guard(config).recording(result) as guard:
        if config.l2_flush and backend.runs_torch:
            from pytest_gpuperf.timing.l2_flush import L2Flusher, time_flushed

            flusher = L2Flusher(backend.device())
            flusher()
            flush_seconds = backend.time_block(
                flusher, 1
            )  # each flushed call costs its flush too: size samples by both
            iters = iters_for(per_call + flush_seconds, warm.wall_per_call + flush_seconds, config.min_sample_time)
            result.method, result.iters_per_sample = "l2_flush", iters
            sample_loop(
                lambda: time_flushed(timer, step, iters, flusher) / iters,
                result,
                config,
                stop_rule,
                deadline,
                floor,
                guard,
            )
        elif backend.name == "cuda":
            from pytest_gpuperf.timing.cuda.device_time import measure_device_time

            measure_device_time(backend, step, result, SamplingPlan(config, stop_rule, deadline, floor, guard), warm)
        else:

            def take() -> float:
                return timer(step, iters) / iters

            if backend.name == "cpu" and config.shift_layout:
                from pytest_gpuperf.timing.layout import shifted, steady_heap

                take = shifted(take)
                result.instruments[LAYOUT] = {"layout_shifted": True, "heap_steady": steady_heap()}
            sample_loop(take, result, config, stop_rule, deadline, floor, guard)
    return result
