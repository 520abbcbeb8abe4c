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
   step's buffers do not keep one layout (4K aliasing can slow a whole process several times) for the process.
   Sampling stops at the first of (``TimingResult.stop``): ``decided`` (the baseline's stop rule,
   :mod:`pytest_gpuperf.judging.stop_rule`, says more samples would not change the verdict), ``precise``
   (no baseline; the judged quantile's 95% half-width is below ``target_precision``), ``max_samples``, or
   ``budget`` (``budget_exhausted`` when undecided) -- but never before :data:`MIN_SAMPLES_FLOOR` samples
   unless one sample is a third of the budget.

How the judged samples are timed (``TimingResult.method``) is the backend's sampler's
(``Backend.sampler``, :mod:`pytest_gpuperf.timing.samplers`):

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

Instruments (``Backend.instruments`` over the whole measurement: the CPU threads; then the contention guard and the
sampler's own around the samples: the heap layout, NVML's clocks, the power warm-up) are entered through one
``ExitStack``; after they exit, the record is built once from the samples, the stop reason and their facts
(:func:`~pytest_gpuperf.timing.record.build_record`) and returned finished: read-only.
The judged statistic is the :data:`STAT_QUANTILE` quantile of the samples (``TimingResult.typical``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from pytest_gpuperf.stats import STAT_QUANTILE, median, quantile, quantile_precision, spread_subset  # noqa: F401
from pytest_gpuperf.timing.contention import ContentionGuard, process_wait_reader, thread_wait_reader
from pytest_gpuperf.timing.record import build_record
from pytest_gpuperf.timing.samplers import blocking_note, thread_time_block  # noqa: F401 (re-exported)
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
    from pytest_gpuperf.timing.samplers import Sampler, TimedBackend


def new_guard(config: MeasureConfig) -> ContentionGuard:
    """The contention guard of one measurement (no retakes when ranks must agree on every count)."""
    read_wait = process_wait_reader() if config.wait_scope == "process" else thread_wait_reader()
    retakes = 0 if counted(config) else config.min_samples
    return ContentionGuard(
        read_wait=read_wait, limit=config.wait_share_limit, max_retakes=retakes, scope=config.wait_scope
    )


def _warm(sampler: Sampler, step: Callable[[], object], config: MeasureConfig) -> WarmupResult:
    min_time = sampler.warmup_seconds(config)
    budget = math.inf if counted(config) else max(min_time, config.warmup_share * config.max_time)
    return warm_up(
        lambda: sampler.time_calls(step, 1),
        min_time=min_time,
        min_calls=max(config.min_warmup_calls, config.warmup_calls),
        budget=budget,
        tolerance=config.settle_tolerance,
        cpu_now=sampler.cpu_now,
        wait_ns=thread_wait_reader(),
        fixed_calls=config.min_warmup_calls if counted(config) else None,
    )


def plan_sampling(
    config: MeasureConfig, stop_rule: StopCheck | None, started: float, warm: WarmupResult, per_call: float
) -> SamplingPlan:
    """The samples' plan after the warm-up: calls per sample, deadline, floor and a new contention guard."""
    iters = iters_for(per_call, warm.wall_per_call, config.min_sample_time)
    deadline = math.inf if counted(config) else started + config.max_time
    floor = sample_floor(config, max(per_call, warm.wall_per_call) * iters)
    note = ""
    if floor == 1:
        note = f"one call ({warm.wall_per_call:.3g} s) is over a third of the {config.max_time:g} s budget"
    return SamplingPlan(config, stop_rule, deadline, floor, new_guard(config), iters, warm, per_call, note)


def measure_time(
    backend: TimedBackend,
    step: Callable[[], object],
    config: MeasureConfig,
    stop_rule: StopCheck | None = None,
) -> TimingResult:
    """Warm up until steady, then sample ``step`` within ``config.max_time`` with the backend's sampler (module doc).

    ``stop_rule`` (built from the baseline and tolerance) ends sampling as soon as the verdict is clear;
    without it sampling stops at ``target_precision``.
    """
    started = time.perf_counter()
    with ExitStack() as stack:
        instruments = [stack.enter_context(instrument) for instrument in backend.instruments(config)]
        sampler = backend.sampler(config)  # inside the backend's instruments: the CPU's clock reads its threads
        warm = _warm(sampler, step, config)
        sampler, per_call, settle_note = sampler.settle(warm, config)
        plan = plan_sampling(config, stop_rule, started, warm, per_call)
        instruments += [stack.enter_context(instrument) for instrument in (plan.guard, *sampler.instruments())]
        taken = sampler.sample(step, plan)
    record = build_record(taken, warm, [settle_note, plan.note], instruments)
    return record.finish(time.perf_counter() - started)
