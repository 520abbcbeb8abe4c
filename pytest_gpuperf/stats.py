"""Statistics of timing samples: quantiles, their distribution-free precision, compact sample subsets.

Pure Python (no torch, numpy or yaml) and below the timing loop: judging, stop rules and reports import
this module, never the loop itself.
"""

from __future__ import annotations

import math

#: The statistic judged and stored as a time metric's value: this quantile of the per-step samples.
#: Noise from preemption and contention only ever slows a sample down, so a low quantile tracks the
#: step's own speed where the median swings with the neighbours' load (docs/PERFORMANCE.md has the
#: figures); on a quiet GPU it is within noise of the median.
STAT_QUANTILE = 0.2


def median(values: list[float]) -> float:
    """The median of ``values``."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` with linear interpolation (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def quantile_precision(samples: list[float], q: float = STAT_QUANTILE) -> float:
    """Relative 95% half-width of the ``q`` quantile, from order statistics (distribution-free).

    The ranks ``n q -+ 1.96 sqrt(n q (1 - q))`` bound the quantile with ~95% confidence.
    """
    n = len(samples)
    if n < 3:
        return float("inf")
    ordered = sorted(samples)
    half = 1.96 * math.sqrt(n * q * (1.0 - q))
    lo = max(0, math.floor(n * q - half))
    hi = min(n - 1, math.ceil(n * q + half))
    center = quantile(samples, q)
    if center <= 0:
        return float("inf")
    return (ordered[hi] - ordered[lo]) / (2.0 * center)


def spread_subset(values: list[float], keep: int = 30) -> list[float]:
    """``keep`` evenly spaced order statistics of ``values`` (all of them, sorted, when fewer).

    A baseline keeps a few dozen samples per metric; the first ``keep`` of a long
    run would over-represent its start, evenly spaced quantiles keep its shape.
    """
    ordered = sorted(values)
    if len(ordered) <= keep:
        return ordered
    step = (len(ordered) - 1) / (keep - 1)
    return [ordered[round(i * step)] for i in range(keep)]
