"""One stop criterion for every timing path: when a measurement has the samples it needs.

As nvbench's ``stopping_criterion`` (``is_finished()``, asked after each sample): the sampling loop of every
backend and CUDA's profiler fallback, which gets all its samples from one profiler session, ask the same
:meth:`StopCriterion.is_finished`, and it writes the reason into the record (``TimingResult.stop``):

* ``decided``: the baseline's stop rule says more samples would not change the verdict;
* ``precise``: no baseline, and the judged quantile's 95% half-width is below ``target_precision``;
* ``max_samples``: as many samples as ``max_samples``;
* ``budget``: the deadline passed with at least ``floor`` samples (``budget_exhausted``: undecided).

None of the first three is asked before ``min_samples`` samples, unless no more can come (``final``), nor before
``span_until``: a GPU at its power cap moves its clock in a feedback loop, so a measurement must span enough of it
(:data:`pytest_gpuperf.timing.cuda.device_time.CAPPED_SPAN`) whatever the samples already say.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pytest_gpuperf.stats import quantile_precision


class Limits(Protocol):
    """The loop settings the criterion reads (:class:`~pytest_gpuperf.timing.sampling.MeasureConfig`)."""

    min_samples: int
    max_samples: int
    target_precision: float


class Record(Protocol):
    """The record the criterion reads and writes (:class:`~pytest_gpuperf.timing.sampling.TimingResult`)."""

    samples: list[float]
    precision: float
    stop: str
    budget_exhausted: bool


class Decides(Protocol):
    """A baseline's stop rule (:class:`~pytest_gpuperf.timing.sampling.StopCheck`)."""

    def decided(self, result: Record) -> bool:  # pragma: no cover - a protocol
        """True when more samples would not change the decision."""
        ...


@dataclass(frozen=True)
class StopCriterion:
    """When to stop sampling one measurement (module doc)."""

    config: Limits
    stop_rule: Decides | None
    deadline: float
    floor: int
    now: Callable[[], float] = field(default=time.perf_counter)
    #: No stop but the deadline before this time (``now()``'s clock): the measurement's least span.
    span_until: float = 0.0

    def is_finished(self, result: Record, final: bool = False) -> bool:
        """True when ``result``'s samples suffice (its ``stop``, ``precision`` and ``budget_exhausted`` set).

        ``final``: no more samples can be taken (one profiler session gave all of them): the criterion still
        says why it stopped, and ``budget`` when the samples cannot decide.
        """
        n = len(result.samples)
        if not final and self.span_until and self.now() < min(self.span_until, self.deadline):
            return False
        if n >= self.config.min_samples or final:
            result.precision = quantile_precision(result.samples)
            if self.stop_rule is not None and self.stop_rule.decided(result):
                result.stop = "decided"
            elif self.stop_rule is None and result.precision <= self.config.target_precision:
                result.stop = "precise"
            elif n >= self.config.max_samples and not final:
                result.stop = "max_samples"
            if result.stop:
                return True
        if final or (self.now() >= self.deadline and n >= self.floor):
            result.stop = "budget"
            result.precision = quantile_precision(result.samples)
            result.budget_exhausted = True  # undecided (or imprecise) when the time ran out
            return True
        return False
