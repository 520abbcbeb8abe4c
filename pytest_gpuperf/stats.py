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


def judged_quantile(better: str) -> float:
    """The quantile judged for a metric: low times, high throughputs (both: the fast side)."""
    return STAT_QUANTILE if better == "lower" else 1.0 - STAT_QUANTILE


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


#: One-sided z for 95% power (and for a 95% one-sided noise bound).
Z_95 = 1.645


def process_spread(values: list[float]) -> float:
    """Relative range of one statistic over processes: ``max / min - 1`` (0 for fewer than two)."""
    positive = [v for v in values if v > 0]
    if len(positive) < 2:
        return 0.0
    return max(positive) / min(positive) - 1.0


def log_sigma(values: list[float], within: float = 0.0) -> float:
    """Standard deviation of ``log(value)`` between processes, floored by the within-process one.

    ``within`` is a relative 95% half-width (``quantile_precision``) of one process's statistic; with one
    process it is all there is.
    """
    inner = within / 1.96 if math.isfinite(within) and within > 0 else 0.0
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2:
        return inner
    mean = sum(logs) / len(logs)
    between = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    return max(between, inner)


def min_detectable_change(sigma: float, tolerance: float, processes: int = 1) -> float:
    """Smallest slowdown the gate catches with 95% power at ``tolerance``, for a per-process noise ``sigma``.

    A run's log ratio to the baseline is ``delta + noise`` with noise ``sigma * sqrt(1 + 1/processes)`` (the
    run's process and the baseline's median over ``processes``). The gate fails a run past ``log(1 + t)``, so
    it catches ``delta`` with 95% power when ``delta - 1.645 sd >= log(1 + t)``.
    """
    sd = sigma * math.sqrt(1.0 + 1.0 / max(1, processes))
    return (1.0 + tolerance) * math.exp(Z_95 * sd) - 1.0


def noise_bound(sigma: float, processes: int = 1) -> float:
    """The slowdown unchanged code reaches in 5% of runs (one-sided): a tolerance below it fails by chance."""
    return math.exp(Z_95 * sigma * math.sqrt(1.0 + 1.0 / max(1, processes))) - 1.0


#: Fewest (clock, time) pairs a power-law fit is made from.
FIT_MIN_POINTS = 8
#: Smallest standard deviation of ``log(clock)`` a fit needs: below it the clock did not move enough to show anything.
FIT_MIN_LOG_SPREAD = 0.004


def power_law_exponent(x: list[float], y: list[float]) -> tuple[float, float] | None:
    """Least-squares ``a`` with ``y ~ x**-a`` over paired positive samples, and its standard error; or None.

    None with fewer than :data:`FIT_MIN_POINTS` pairs or when ``x`` hardly varies (:data:`FIT_MIN_LOG_SPREAD`):
    then nothing can be said about how ``y`` follows ``x``.
    """
    pairs = [(math.log(a), math.log(b)) for a, b in zip(x, y, strict=False) if a > 0 and b > 0]
    n = len(pairs)
    if n < FIT_MIN_POINTS:
        return None
    mx = sum(p[0] for p in pairs) / n
    my = sum(p[1] for p in pairs) / n
    sxx = sum((p[0] - mx) ** 2 for p in pairs)
    if math.sqrt(sxx / (n - 1)) < FIT_MIN_LOG_SPREAD:
        return None
    slope = sum((p[0] - mx) * (p[1] - my) for p in pairs) / sxx
    residual = sum((p[1] - my - slope * (p[0] - mx)) ** 2 for p in pairs) / (n - 2)
    return -slope, math.sqrt(residual / sxx)
