"""The measuring loop's vocabulary: its settings, the plan every sampler shares and the sampling loop.

Below :mod:`pytest_gpuperf.timing.loop` (warm-up, then the backend's sampler) and the samplers
(:mod:`pytest_gpuperf.timing.samplers`, :mod:`pytest_gpuperf.timing.cuda.device_time`), which sample through
:func:`sample_loop`; see :mod:`pytest_gpuperf.timing.loop` for the phases. The record is :mod:`.record`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pytest_gpuperf.timing.contention import WAIT_SHARE_LIMIT
from pytest_gpuperf.timing.record import (  # noqa: F401 (re-exported: the loop's vocabulary)
    CLOCKS,
    EXPONENT_SE_LIMIT,
    HOST_BOUND_SHARE,
    LAYOUT,
    POWER_STATE,
    Samples,
    TimingResult,
)
from pytest_gpuperf.timing.stop_criterion import Record, StopCriterion
from pytest_gpuperf.timing.warmup import SETTLE_TOLERANCE, WarmupResult

if TYPE_CHECKING:
    from pytest_gpuperf.timing.contention import ContentionGuard

GRAPH_MODES = ("auto", "on", "off")
CPU_CLOCKS = ("auto", "thread", "wall")
#: Fewest samples a measurement takes past its budget (one when a single sample is a third of the budget).
MIN_SAMPLES_FLOOR = 3
#: A CPU step whose thread computed for less than this share of the wall time it was not waiting for a CPU waits
#: (sleep, I/O, a lock, a data loader, worker threads) when it also gave up its CPU (:data:`WAIT_SWITCHES`): the
#: thread clock would not count the waiting, so the step is timed by the wall clock. Waiting of a tenth of the
#: step's time (1.11x its CPU time) or more is counted; at the former 0.5 a step could wait as long as it computed
#: (2x) unseen. Pure compute reads 0.99-1.0 (run-queue wait subtracted), yet on a busy VM a throttled or stolen
#: CPU can read lower: such a step gives up no CPU on its own, so the switches tell it from waiting.
BLOCKING_SHARE = 0.9
#: Below this share a step blocks whatever the switches say (the rule before :data:`BLOCKING_SHARE` was raised).
CERTAIN_BLOCKING_SHARE = 0.5
#: Voluntary context switches per warm-up call from which a step in the band below :data:`BLOCKING_SHARE` waits
#: (one per call in the steps that wait every call; a tenth leaves room for waits in some calls only), at least 2.
WAIT_SWITCHES = 0.1


@dataclass(frozen=True)
class MeasureConfig:
    """Knobs of the measuring loop (from ini, command line or the test's marker)."""

    #: The warm-up lasts at least this long and makes at least ``warmup_calls`` calls (within its budget).
    warmup_time: float = 0.05
    #: A transient can be flat for a while (an elementwise op: a hundred slow calls, then a thousand times
    #: faster), so the warm-up makes this many calls when its budget allows, then continues while calls still trend.
    warmup_calls: int = 200
    #: Warm-up calls when every decision must be a count (distributed lockstep).
    min_warmup_calls: int = 2
    #: Share of ``max_time`` the warm-up may take while the step still trends.
    warmup_share: float = 0.5
    settle_tolerance: float = SETTLE_TOLERANCE
    min_sample_time: float = 0.002
    min_samples: int = 30
    max_samples: int = 200
    max_time: float = 2.0
    #: Every decision is a count all ranks share (the distributed lockstep loop): no clock-based stop, no retake,
    #: a fixed warm-up of ``min_warmup_calls``, no profiler; ``max_samples`` is the sample count.
    lockstep: bool = False
    target_precision: float = 0.01
    l2_flush: bool = False
    #: CUDA graph of the whole step: auto/on (capture, fall back when it fails), off (never).
    cuda_graph: str = "auto"
    #: On CUDA without a graph: sum the step's kernel durations from CUPTI (torch.profiler) before falling back
    #: to events.
    cupti: bool = True
    cpu_clock: str = "auto"
    #: ``cpu_clock`` "thread" came from the baseline's method (``auto`` in the settings), not from the user: a step
    #: that now waits is still timed by the wall clock, so added waiting shows as a slowdown.
    wall_when_waiting: bool = False
    #: Intra-op torch threads while timing a CPU step (0: leave the test's own count).
    cpu_threads: int = 1
    #: Retake a sample whose thread waited for a CPU longer than this share of it.
    wait_share_limit: float = WAIT_SHARE_LIMIT
    #: Whose run-queue wait the contention guard reads: the calling thread's ("thread"), or every thread of the
    #: process ("process": the backend's work runs on worker threads, :meth:`Backend.wait_scope`).
    wait_scope: str = "thread"
    #: CUDA: most seconds of graph replays before sampling while the SM clock or power still drifts (0: none).
    power_warmup: float = 2.5
    #: GPUs: least seconds of load before the first sample, for an idle GPU's clock ramp (the fixture sets 0.3 s).
    #: On CUDA the power warm-up replaces it when it runs (:func:`ramp_in_warmup`).
    gpu_ramp: float = 0.0
    #: CPU: shift the heap by a random spacer between samples (:mod:`pytest_gpuperf.timing.layout`).
    shift_layout: bool = True


@dataclass(frozen=True)
class SamplingPlan:
    """What every sampler of one measurement shares: its settings, the baseline's stop rule (None: sample to
    ``target_precision``), the deadline, the least samples taken past it, the contention guard, the calls per
    sample, what the warm-up found and the settled clock's per-call seconds (0: it read nothing)."""

    config: MeasureConfig
    stop_rule: StopCheck | None
    deadline: float
    floor: int
    guard: ContentionGuard
    iters: int = 1
    warm: WarmupResult = field(default_factory=WarmupResult)
    per_call: float = 0.0
    #: Why the plan differs from the usual one ("" when it does not).
    note: str = ""

    def sample(self, take: Callable[[], float], taken: Record) -> None:
        """:func:`sample_loop` on this plan, each sample through the contention guard."""
        sample_loop(take, taken, self.config, self.stop_rule, self.deadline, self.floor, self.guard)


class StopCheck(Protocol):
    """Says whether the samples so far suffice to decide against the baseline."""

    def decided(self, result: Record) -> bool:
        """True when more samples would not change the decision."""
        ...


def counted(config: MeasureConfig) -> bool:
    """True when every decision must be a count (``lockstep``: the distributed lockstep loop)."""
    return config.lockstep


def sample_floor(config: MeasureConfig, seconds_per_sample: float) -> int:
    """Samples taken even past the budget: :data:`MIN_SAMPLES_FLOOR`, one when a sample is a third of it."""
    if counted(config) or seconds_per_sample * MIN_SAMPLES_FLOOR <= config.max_time:
        return min(MIN_SAMPLES_FLOOR, max(1, config.min_samples))
    return 1


def sample_loop(
    take: Callable[[], float],
    result: Record,
    config: MeasureConfig,
    stop_rule: StopCheck | None,
    deadline: float,
    floor: int,
    guard: ContentionGuard | None = None,
    now: Callable[[], float] = time.perf_counter,
    span: float = 0.0,
) -> None:
    """Append samples from ``take`` to ``result.samples`` until the stop criterion is met; sets ``stop``.

    ``span``: seconds the sampling lasts at least (within ``deadline``), whatever the samples already say.
    """
    criterion = StopCriterion(config, stop_rule, deadline, floor, now, span_until=now() + span if span > 0 else 0.0)
    while True:
        if guard is not None:
            value = guard.take(take, may_retake=lambda: now() < deadline)
        else:
            value = take()
        result.samples.append(value)
        if criterion.is_finished(result):
            return


def power_warmup_planned(config: MeasureConfig) -> bool:
    """Whether a CUDA step's samples will follow the power warm-up (a graph is tried, the warm-up is on, the
    counts are free): it holds the GPU's clock and power before sampling, so the ramp need not be paid twice."""
    return config.power_warmup > 0 and config.cuda_graph != "off" and not counted(config) and not config.l2_flush


def least_warmup(config: MeasureConfig, power_warmup: bool = False) -> float:
    """Least seconds of the step's own warm-up: ``warmup_time``, stretched to ``gpu_ramp`` unless the sampler's
    power warm-up (``power_warmup``, CUDA) will ramp the GPU (without NVML or a graph it ramps by itself)."""
    if power_warmup and power_warmup_planned(config):
        return config.warmup_time
    return max(config.warmup_time, config.gpu_ramp)


def ramp_in_warmup(backend_name: str, config: MeasureConfig) -> float:
    """:func:`least_warmup` of a built-in backend by its name (the CUDA sampler runs the power warm-up)."""
    return least_warmup(config, power_warmup=backend_name == "cuda")
