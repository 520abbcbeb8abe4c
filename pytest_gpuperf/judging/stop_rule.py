"""When to stop sampling: as soon as the run's samples can decide against the baseline.

nvbench stops when a kernel's relative noise falls under a fixed bound. A
regression gate needs something sharper: enough samples that the verdict
against *this* baseline and *this* tolerance is clear. With ``r`` the ratio of
the judged quantiles (run / baseline, oriented so > 1 is worse), ``h`` the
combined relative 95% half-width of both (order statistics, distribution-free)
and ``t`` the tolerance, sampling stops when

* ``r (1 + h) < 1 + t``: clearly within tolerance (the common case: stops early), or
* ``r (1 - h) > 1 + t``: clearly past it (judged, then confirmed by a second measurement), or
* the run's own half-width is below ``t / 4`` (more samples cannot sharpen a borderline case),

otherwise at the time budget, which the verdict then reports. ``r`` is read from
the same samples and quantile :mod:`pytest_gpuperf.judging.compare` will judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.stats import judged_quantile, quantile, quantile_precision

if TYPE_CHECKING:
    from pytest_gpuperf.timing import TimingResult

#: Stop on precision alone once the run's statistic is known to this fraction of the tolerance.
PRECISION_FRACTION = 0.25


@dataclass
class StopRule:
    """Decides, after each sample, whether the verdict against the baseline is already clear."""

    base: Sequence[float]
    tolerance: float
    better: str = "lower"
    items: float | None = None  # throughput metrics: value = items / seconds

    def __post_init__(self) -> None:
        self._q = judged_quantile(self.better)
        self._base = (quantile(list(self.base), self._q), quantile_precision(list(self.base), self._q))

    def run_values(self, result: TimingResult) -> list[float]:
        """The run's samples in the baseline's terms (time, or throughput when ``items`` is set)."""
        if self.items is None:
            return list(result.samples)
        return [self.items / v for v in result.samples if v > 0]

    def decided(self, result: TimingResult) -> bool:
        """True when more samples would not change the verdict."""
        run = self.run_values(result)
        base_stat, base_precision = self._base
        if len(run) < 3 or base_stat <= 0 or quantile(run, self._q) <= 0:
            return False
        ratio = quantile(run, self._q) / base_stat
        worse = ratio if self.better == "lower" else 1.0 / ratio
        run_precision = quantile_precision(run, self._q)
        half = math.hypot(run_precision, base_precision)
        limit = 1.0 + self.tolerance
        if worse * (1.0 + half) < limit or worse * (1.0 - half) > limit:
            return True
        return run_precision <= self.tolerance * PRECISION_FRACTION


def stop_rule_for(entry: dict[str, Any] | None, tolerance: float, items: float | None = None) -> StopRule | None:
    """The stop rule for a time (``items`` None) or throughput metric's baseline ``entry``; None without one."""
    if not entry or len(entry.get("samples") or []) < 3:
        return None
    better = str(entry.get("better", "lower" if items is None else "higher"))
    return StopRule(entry["samples"], tolerance, better, items)
