"""When to stop sampling: as soon as the run's samples can decide against the baseline.

nvbench stops when a kernel's relative noise falls under a fixed bound. A
regression gate needs something sharper: enough samples that the verdict
against *this* baseline and *this* tolerance is clear. With ``r`` the ratio of
the judged quantiles (run / baseline, oriented so > 1 is worse), ``h`` the
combined relative 95% half-width of both (order statistics, distribution-free)
and ``t`` the tolerance, one comparison is *clear* when

* ``r (1 + h) < 1 + t``: clearly within tolerance (the common case: stops early), or
* ``r (1 - h) > 1 + t``: clearly past it (judged, then confirmed by a second measurement).

The raw times and (when the baseline has them for the same probe) the
drift-normalized ones are both judged, and a regression needs both, so sampling
stops when either is clearly within tolerance, or both are clearly past it, or
the run's own half-width is below ``t / 4`` (more samples cannot sharpen a
borderline case); otherwise at the time budget, which the verdict then reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.compare import judged_quantile, normalized_comparable
from pytest_gpuperf.measure import TimingResult, quantile, quantile_precision

#: Stop on precision alone once the run's statistic is known to this fraction of the tolerance.
PRECISION_FRACTION = 0.25
WITHIN, PAST, UNCLEAR = "within", "past", "unclear"


@dataclass
class Comparison:
    """One series of baseline values (raw or normalized) and how to read the run in the same terms."""

    base: Sequence[float]
    normalized: bool


@dataclass
class StopRule:
    """Decides, after each sample, whether the verdict against the baseline is already clear."""

    comparisons: list[Comparison]
    tolerance: float
    better: str = "lower"
    items: float | None = None  # throughput metrics: value = items / seconds

    def __post_init__(self) -> None:
        self._q = judged_quantile(self.better)
        self._base = [
            (quantile(list(c.base), self._q), quantile_precision(list(c.base), self._q)) for c in self.comparisons
        ]

    def run_values(self, result: TimingResult, normalized: bool) -> list[float]:
        """The run's samples in the baseline's terms (normalized or raw; time or throughput)."""
        values = result.normalized if normalized else result.samples
        if self.items is None:
            return list(values)
        scale = 1.0 if normalized else self.items
        return [scale / v for v in values if v > 0]

    def _state(self, run: list[float], base_stat: float, base_precision: float) -> tuple[str, float]:
        if len(run) < 3 or base_stat <= 0:
            return UNCLEAR, float("inf")
        stat = quantile(run, self._q)
        if stat <= 0:
            return UNCLEAR, float("inf")
        ratio = stat / base_stat
        worse = ratio if self.better == "lower" else 1.0 / ratio
        run_precision = quantile_precision(run, self._q)
        half = math.hypot(run_precision, base_precision)
        limit = 1.0 + self.tolerance
        if worse * (1.0 + half) < limit:
            return WITHIN, run_precision
        if worse * (1.0 - half) > limit:
            return PAST, run_precision
        return UNCLEAR, run_precision

    def decided(self, result: TimingResult) -> bool:
        """True when more samples would not change the verdict."""
        states = []
        for comparison, (base_stat, base_precision) in zip(self.comparisons, self._base, strict=True):
            states.append(self._state(self.run_values(result, comparison.normalized), base_stat, base_precision))
        if any(state == WITHIN for state, _ in states) or all(state == PAST for state, _ in states):
            return True
        return max(precision for _, precision in states) <= self.tolerance * PRECISION_FRACTION


def stop_rule_for(
    entry: dict[str, Any] | None, tolerance: float, reference: str, items: float | None = None
) -> StopRule | None:
    """The stop rule for a time (``items`` None) or throughput metric's baseline ``entry``; None without one."""
    if not entry:
        return None
    better = str(entry.get("better", "lower" if items is None else "higher"))
    comparisons = []
    if len(entry.get("samples") or []) >= 3:
        comparisons.append(Comparison(entry["samples"], False))
    if normalized_comparable(reference, entry):
        comparisons.append(Comparison(entry["normalized"], True))
    return StopRule(comparisons, tolerance, better, items) if comparisons else None
