"""The measuring loop's vocabulary: its settings, its result and the sampling loop with its stop reasons.

Below :mod:`pytest_gpuperf.timing.loop` (which warms up and chooses the clock) and
:mod:`pytest_gpuperf.timing.cuda.device_time` (device time on CUDA), both of which sample
through :func:`sample_loop`; see :mod:`pytest_gpuperf.timing.loop` for the phases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pytest_gpuperf.stats import STAT_QUANTILE, median, quantile
from pytest_gpuperf.timing.contention import INSTRUMENT as CONTENTION
from pytest_gpuperf.timing.contention import WAIT_SHARE_LIMIT
from pytest_gpuperf.timing.warmup import SETTLE_TOLERANCE, WarmupResult

if TYPE_CHECKING:
    from pytest_gpuperf.timing.contention import ContentionGuard

GRAPH_MODES = ("auto", "on", "off")
CPU_CLOCKS = ("auto", "thread", "wall")
#: Fewest samples a measurement takes past its budget (one when a single sample is a third of the budget).
MIN_SAMPLES_FLOOR = 3
#: A CPU step whose thread ran for less than this share of the wall time it was not waiting for a CPU blocks.
BLOCKING_SHARE = 0.5
#: Device busy for less than this share of the eager step's time: the host cannot keep the device busy.
HOST_BOUND_SHARE = 0.5


#: A clock-exponent fit less sure than this (standard error) says nothing the band [0, 1] does not: not kept.
EXPONENT_SE_LIMIT = 1.0


@dataclass(frozen=True)
class MeasureConfig:
    """Knobs of the measuring loop (from ini, command line or the test's marker)."""

    #: The warm-up lasts at least this long and makes at least ``warmup_calls`` calls (within its budget).
    warmup_time: float = 0.05
    #: A transient can be flat for a while (``x * 2`` on 64K floats: ~100 calls of 8 ms, then 4.5 us), so the
    #: warm-up makes this many calls when its budget allows, then continues while calls still trend.
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
    #: Intra-op torch threads while timing a CPU step (0: leave the test's own count).
    cpu_threads: int = 1
    #: Retake a sample whose thread waited for a CPU longer than this share of it.
    wait_share_limit: float = WAIT_SHARE_LIMIT
    #: CUDA: most seconds of graph replays before sampling while the SM clock or power still drifts (0: none).
    power_warmup: float = 2.5
    #: GPUs: least seconds of load before the first sample, for an idle GPU's clock ramp (the fixture sets 0.3 s).
    #: On CUDA the power warm-up replaces it when it runs (:func:`ramp_in_warmup`).
    gpu_ramp: float = 0.0
    #: CPU: shift the heap by a random spacer between samples (:mod:`pytest_gpuperf.timing.layout`).
    shift_layout: bool = True


#: Names of the instruments' facts in :attr:`TimingResult.instruments` (the contention guard's is its own).
CLOCKS, POWER_STATE, LAYOUT = "clocks", "power_state", "layout"


@dataclass
class TimingResult:
    """One measurement: per-step times (the judged ones), eager times on CUDA, and how they were taken.

    Filled while the measurement is taken, inside :mod:`pytest_gpuperf.timing` only: the sampling loop appends
    samples, its :class:`~pytest_gpuperf.timing.stop_criterion.StopCriterion` says why it stopped, and each
    instrument (NVML clocks, the contention guard, the power warm-up, the heap shift) writes its own facts under
    :attr:`instruments`. :func:`~pytest_gpuperf.timing.loop.measure_time` then :meth:`finish` es it once: the
    record it returns is read-only.
    """

    samples: list[float]
    #: CUDA: per-step times of eager calls between device events (the user's wall experience of the device).
    eager_samples: list[float] = field(default_factory=list)
    #: CUDA: the SM clock (MHz, mean of the NVML readings right before and after) of each judged sample.
    sample_clocks: list[float] = field(default_factory=list)
    iters_per_sample: int = 1
    method: str = "events"
    method_note: str = ""
    #: Why sampling stopped, its quantile's precision, undecided at the deadline (the stop criterion's).
    stop: str = ""
    precision: float = float("nan")
    budget_exhausted: bool = False
    #: What the warm-up found (None: the step was not warmed up, as in a unit test's record).
    warmup: WarmupResult | None = None
    #: Intra-op torch threads the CPU step ran with (None on other backends).
    cpu_threads: int | None = None
    #: Each instrument's facts, by name: :data:`CLOCKS` (NVML readings), :data:`CONTENTION` (the measuring
    #: thread's run-queue wait, CPU pressure), :data:`POWER_STATE` (the CUDA power warm-up), :data:`LAYOUT` (CPU).
    instruments: dict[str, dict[str, Any]] = field(default_factory=dict)
    elapsed: float = 0.0

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_finished"):
            raise AttributeError(f"a finished TimingResult is read-only (tried to set {name!r})")
        object.__setattr__(self, name, value)

    def finish(self, elapsed: float) -> TimingResult:
        """Close the record: its wall seconds; nothing can be set on it afterwards. Returns it."""
        self.elapsed = elapsed
        object.__setattr__(self, "_finished", True)
        return self

    @property
    def warmup_calls(self) -> int:
        """Calls the warm-up made (0 without one)."""
        return self.warmup.calls if self.warmup else 0

    @property
    def warmup_seconds(self) -> float:
        """Seconds the warm-up took (0 without one)."""
        return self.warmup.seconds if self.warmup else 0.0

    @property
    def settled(self) -> bool:
        """False when the warm-up ended with the step still trending (its samples may be of a transient)."""
        return self.warmup.settled if self.warmup else True

    @property
    def clocks(self) -> dict[str, Any] | None:
        """CUDA: the SM clock and clock-event reasons NVML read while measuring (None: not read)."""
        return self.instruments.get(CLOCKS)

    @property
    def contention(self) -> dict[str, Any] | None:
        """The contention guard's summary (:meth:`ContentionGuard.summary`), None without a guard."""
        return self.instruments.get(CONTENTION)

    @property
    def power_state(self) -> dict[str, Any] | None:
        """CUDA: what the power warm-up found (:class:`~pytest_gpuperf.timing.cuda.power_state.PowerState` facts)."""
        return self.instruments.get(POWER_STATE)

    @property
    def layout_shifted(self) -> bool:
        """CPU: the heap was shifted between samples (:mod:`pytest_gpuperf.timing.layout`)."""
        return bool(self.instruments.get(LAYOUT, {}).get("layout_shifted"))

    @property
    def heap_steady(self) -> bool:
        """CPU: glibc's heap thresholds were fixed while the heap was shifted."""
        return bool(self.instruments.get(LAYOUT, {}).get("heap_steady"))

    @property
    def cycles_samples(self) -> list[float]:
        """Cycles per step of each sample (device time x its SM clock); [] unless every sample has its clock."""
        if not self.sample_clocks or len(self.sample_clocks) != len(self.samples):
            return []
        return [t * mhz * 1e6 for t, mhz in zip(self.samples, self.sample_clocks, strict=True)]

    @property
    def clock_exponent(self) -> tuple[float, float] | None:
        """How this step's time followed its own SM clock: ``a`` in ``t ~ f**-a`` and its standard error, or None.

        Fitted over the judged samples and the clock read around each
        (:func:`~pytest_gpuperf.stats.power_law_exponent`); None when the clock hardly moved or a sample has no clock.
        """
        from pytest_gpuperf.stats import power_law_exponent

        if not self.sample_clocks or len(self.sample_clocks) != len(self.samples):
            return None
        return power_law_exponent(self.sample_clocks, self.samples)

    @property
    def host_overhead_samples(self) -> list[float]:
        """Eager minus device time per step, sample by sample where both were taken in pairs (never below 0)."""
        if not self.eager_samples:
            return []
        if len(self.eager_samples) == len(self.samples):
            return [max(0.0, e - d) for e, d in zip(self.eager_samples, self.samples, strict=True)]
        device = self.typical
        return [max(0.0, e - device) for e in self.eager_samples]

    @property
    def median(self) -> float:
        """Median seconds per step."""
        return median(self.samples)

    @property
    def typical(self) -> float:
        """The judged statistic: the :data:`STAT_QUANTILE` quantile of seconds per step."""
        return quantile(self.samples, STAT_QUANTILE)

    @property
    def eager_time(self) -> float | None:
        """The :data:`STAT_QUANTILE` quantile of the eager per-step times (None when not taken apart)."""
        return quantile(self.eager_samples, STAT_QUANTILE) if self.eager_samples else None

    @property
    def host_overhead(self) -> float | None:
        """Eager time minus device time per step, seconds (None without eager samples)."""
        eager = self.eager_time
        return None if eager is None else eager - self.typical

    @property
    def host_bound(self) -> bool | None:
        """True when the device is busy for less than :data:`HOST_BOUND_SHARE` of the eager step (None: unknown)."""
        eager = self.eager_time
        if eager is None or eager <= 0:
            return None
        return self.typical < HOST_BOUND_SHARE * eager

    @property
    def contended(self) -> bool:
        """True when most kept samples were taken while the measuring thread waited for a CPU."""
        return bool(self.contention and self.contention.get("contended"))

    def summary(self) -> dict[str, object]:
        """JSON-able scalar facts about how the timing was taken (for a metric's ``extra``)."""
        out: dict[str, object] = {
            "iters_per_sample": self.iters_per_sample,
            "precision": self.precision,
            "budget_exhausted": self.budget_exhausted,
            "method": self.method,
            "stop": self.stop,
            "measure_seconds": round(self.elapsed, 4),
            "warmup_calls": self.warmup_calls,
            "warmup_seconds": round(self.warmup_seconds, 4),
            "settled": self.settled,
        }
        if self.warmup is not None and not self.warmup.settled and self.warmup.note:
            out["warmup_note"] = self.warmup.note  # why the warm-up did not settle
        if self.method_note:
            out["method_note"] = self.method_note
        if self.eager_samples:
            out["eager_time"] = self.eager_time
            out["host_overhead"] = self.host_overhead
            out["host_bound"] = self.host_bound
        if self.cpu_threads is not None:
            out["cpu_threads"] = self.cpu_threads
        if self.layout_shifted:
            out["layout_shifted"] = True
            out["heap_steady"] = self.heap_steady
        for key, value in (self.clocks or {}).items():
            if isinstance(value, (int, float, str, bool)):
                out[key] = value
        fit = self.clock_exponent
        if fit is not None and fit[1] <= EXPONENT_SE_LIMIT:
            # Faster at a lower clock is noise, not physics: stored as 0 (its error still says how sure).
            out["clock_exponent"], out["clock_exponent_se"] = round(min(max(0.0, fit[0]), 10.0), 4), round(fit[1], 4)
        for key, value in (self.power_state or {}).items():
            if isinstance(value, (int, float, str, bool)):
                out[key] = value
        if self.contention:
            out["contended"] = self.contended
            out["retaken_samples"] = self.contention.get("retaken", 0)
            out["contended_fraction"] = self.contention.get("contended_fraction", 0.0)
            if self.contention.get("cpu_pressure_avg10") is not None:
                out["cpu_pressure_avg10"] = self.contention["cpu_pressure_avg10"]
        return out


@dataclass(frozen=True)
class SamplingPlan:
    """What every sampling path of one measurement shares: its settings, the baseline's stop rule (None: sample
    to ``target_precision``), the deadline, the least samples taken past it, and the contention guard."""

    config: MeasureConfig
    stop_rule: StopCheck | None
    deadline: float
    floor: int
    guard: ContentionGuard


class StopCheck(Protocol):
    """Says whether the samples so far suffice to decide against the baseline."""

    def decided(self, result: TimingResult) -> bool:
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
    result: TimingResult,
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
    from pytest_gpuperf.timing.stop_criterion import StopCriterion

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


def ramp_in_warmup(backend_name: str, config: MeasureConfig) -> float:
    """Least seconds of the step's own warm-up: ``warmup_time``, stretched to ``gpu_ramp`` unless a CUDA power
    warm-up is planned (which then ramps the GPU; without NVML or a graph the CUDA path ramps by itself)."""
    if backend_name == "cuda" and power_warmup_planned(config):
        return config.warmup_time
    return max(config.warmup_time, config.gpu_ramp)
