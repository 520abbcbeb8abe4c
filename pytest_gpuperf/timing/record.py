"""The timing record: what the sampler took, the instruments' facts, and the one function that builds it.

A measurement runs a sampler (:mod:`pytest_gpuperf.timing.samplers`), which fills its own :class:`Samples` (the
samples, why sampling stopped, how they were timed), and instruments (:class:`Instrument`: the contention guard,
NVML's clock watch, the CUDA power warm-up, the heap layout shift, the CPU threads), each entered and exited once
around the part of the measurement it watches. :func:`build_record` then makes the :class:`TimingResult` from those,
once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_gpuperf.stats import STAT_QUANTILE, median, quantile
from pytest_gpuperf.timing.contention import INSTRUMENT as CONTENTION
from pytest_gpuperf.timing.threads import CPU_THREADS
from pytest_gpuperf.timing.warmup import WarmupResult

#: Names of the instruments' facts in :attr:`TimingResult.instruments` (the contention guard's and the CPU
#: threads' are their own).
CLOCKS, POWER_STATE, LAYOUT = "clocks", "power_state", "layout"
#: Device busy for less than this share of the eager step's time: the host cannot keep the device busy.
HOST_BOUND_SHARE = 0.5
#: A clock-exponent fit less sure than this (standard error) says nothing the band [0, 1] does not: not kept.
EXPONENT_SE_LIMIT = 1.0


class Instrument(Protocol):
    """Watches part of a measurement: entered before it, exited after it, then asked for its :meth:`facts`."""

    #: Its key in :attr:`TimingResult.instruments`.
    name: str

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def facts(self) -> dict[str, Any]:
        """What it saw, JSON-able ({}: nothing to report, no key in the record)."""
        ...


@dataclass
class Samples:
    """What a sampler took: the judged samples, why sampling stopped (the stop criterion's fields), how they were
    timed, and on CUDA the eager samples and each sample's SM clock. Filled while sampling, by the sampler only."""

    samples: list[float] = field(default_factory=list)
    method: str = "events"
    iters_per_sample: int = 1
    stop: str = ""
    precision: float = float("nan")
    budget_exhausted: bool = False
    eager_samples: list[float] = field(default_factory=list)
    sample_clocks: list[float] = field(default_factory=list)
    #: Why the samples were timed this way (joined into ``method_note`` after the loop's own notes).
    notes: list[str] = field(default_factory=list)


def build_record(
    taken: Samples, warmup: WarmupResult | None, notes: Iterable[str], instruments: Iterable[Instrument]
) -> TimingResult:
    """The record of one measurement, made once: the sampler's samples, the loop's ``notes`` then the sampler's,
    and each exited instrument's facts under its name."""
    facts = {instrument.name: instrument.facts() for instrument in instruments}
    return TimingResult(
        samples=taken.samples,
        eager_samples=taken.eager_samples,
        sample_clocks=taken.sample_clocks,
        iters_per_sample=taken.iters_per_sample,
        method=taken.method,
        method_note="; ".join(filter(None, [*notes, *taken.notes])),
        stop=taken.stop,
        precision=taken.precision,
        budget_exhausted=taken.budget_exhausted,
        warmup=warmup,
        instruments={name: value for name, value in facts.items() if value},
    )


@dataclass
class TimingResult:
    """One measurement: per-step times (the judged ones), eager times on CUDA, and how they were taken.

    Built once by :func:`build_record` from what the sampler took (:class:`Samples`), the warm-up and the
    instruments' facts; :func:`~pytest_gpuperf.timing.loop.measure_time` then :meth:`finish` es it: the record it
    returns is read-only.
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
    #: Each instrument's facts, by name: :data:`CLOCKS` (NVML readings), :data:`CONTENTION` (the measuring
    #: thread's run-queue wait, CPU pressure), :data:`POWER_STATE` (the CUDA power warm-up), :data:`LAYOUT` and
    #: :data:`CPU_THREADS` (CPU).
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
    def cpu_threads(self) -> int | None:
        """Intra-op torch threads the CPU step ran with (None on other backends)."""
        return self.instruments.get(CPU_THREADS, {}).get(CPU_THREADS)

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
            if self.contention.get("wait_scope") == "process":
                out["wait_scope"] = "process"
            if self.contention.get("cpu_pressure_avg10") is not None:
                out["cpu_pressure_avg10"] = self.contention["cpu_pressure_avg10"]
        return out
