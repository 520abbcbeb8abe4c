"""Change points in a short series of measurements: binary segmentation with a permutation test.

A series is a metric's values over commits (a dozen to a few hundred points). The test for one step is the
largest two-sample t statistic over every split of the segment (each side at least ``min_size`` points, the
spread pooled within the two sides). Its p-value is the share of simulated flat series of the same length, with
normal noise, whose largest statistic reaches it: the statistic does not depend on the noise's size, so one
simulated null per length serves every series, and the false-alarm rate of the first test is ``alpha``. (A
permutation test would not assume normal noise, but on 12 points its smallest attainable p-value is about
1/462: too coarse to tell a step from chance at a low false-alarm rate.) A significant split is kept and both
sides are searched again (each at ``alpha``), which finds several steps. Values are compared in logs when they
are all positive, so a step is a ratio (+30% reads the same at 1 ms and at 1 s).

The location's uncertainty is the range of splits whose fit is not significantly worse than the best one (the
profile likelihood: the residual sum of squares within 3.84 residual variances of the best, a 95% range).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

#: Default significance of one split test: about one false alarm in 330 flat series.
DEFAULT_ALPHA = 0.003
#: Simulated flat series per length; a p-value's resolution is 1 / (SIMULATIONS + 1).
SIMULATIONS = 20000
#: chi-square(1) at 95%: how much worse a split's fit may be and still be in the location's range.
CHI2_95 = 3.841


@dataclass(frozen=True)
class ChangePoint:
    """A step between ``index - 1`` and ``index``: the new level starts at ``index``."""

    index: int
    #: First and last index at which the new level could start (95% range).
    earliest: int
    latest: int
    before: float
    after: float
    p_value: float

    @property
    def change(self) -> float:
        """The step as a fraction of the level before it (``after / before - 1``)."""
        return self.after / self.before - 1.0 if self.before else math.inf


def _split_stats(x: np.ndarray, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """t statistic and residual sum of squares of every split of each row of ``x`` (shape: rows x splits)."""
    n = x.shape[-1]
    k = np.arange(min_size, n - min_size + 1)
    s1 = np.cumsum(x, axis=-1)
    s2 = np.cumsum(x * x, axis=-1)
    total1, total2 = s1[..., -1:], s2[..., -1:]
    left1, left2 = s1[..., k - 1], s2[..., k - 1]
    right1, right2 = total1 - left1, total2 - left2
    sse = (left2 - left1**2 / k) + (right2 - right1**2 / (n - k))
    sse = np.maximum(sse, 0.0)
    diff = np.abs(left1 / k - right1 / (n - k))
    scale = np.sqrt(sse / max(n - 2, 1) * (1.0 / k + 1.0 / (n - k)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), np.where(diff > 0, np.inf, 0.0))
    return t, sse


@functools.lru_cache(maxsize=64)
def _null_maxima(n: int, min_size: int, simulations: int) -> np.ndarray:
    """Sorted largest split statistics of ``simulations`` flat normal series of length ``n`` (fixed seed)."""
    rng = np.random.default_rng(n * 1000 + min_size)
    maxima = np.empty(simulations)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, simulations, chunk):
        stop = min(simulations, start + chunk)
        t, _ = _split_stats(rng.standard_normal((stop - start, n)), min_size)
        maxima[start:stop] = t.max(axis=1)
    return np.sort(maxima)


def _best_split(x: np.ndarray, min_size: int, simulations: int) -> tuple[int, float]:
    """The best split of ``x`` (index of the first point after it) and its p-value."""
    t, _ = _split_stats(x[None, :], min_size)
    best = int(np.argmax(t[0]))
    observed = t[0, best]
    if observed == 0.0:
        return min_size + best, 1.0
    null = _null_maxima(x.size, min_size, simulations)
    exceed = null.size - int(np.searchsorted(null, observed, side="left"))
    return min_size + best, (exceed + 1) / (null.size + 1)


def _location_range(x: np.ndarray, min_size: int, index: int) -> tuple[int, int]:
    """First and last split whose fit is within the 95% profile-likelihood range of the best split ``index``."""
    _, sse = _split_stats(x[None, :], min_size)
    sse = sse[0]
    best_sse = sse[index - min_size]
    variance = best_sse / max(x.size - 2, 1)
    inside = np.flatnonzero(sse - best_sse <= CHI2_95 * variance) + min_size
    near = [i for i in inside if abs(i - index) <= _run_length(inside, index)]
    return int(min(near)), int(max(near))


def _run_length(inside: np.ndarray, index: int) -> int:
    """How far the contiguous run of ``inside`` around ``index`` reaches."""
    members = set(int(i) for i in inside)
    reach = 0
    while index - reach - 1 in members or index + reach + 1 in members:
        reach += 1
    return reach


def find_change_points(
    values: list[float] | np.ndarray,
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = 2,
    min_change: float = 0.0,
    simulations: int = SIMULATIONS,
) -> list[ChangePoint]:
    """The change points of ``values`` in order, each significant at ``alpha`` and at least ``min_change``.

    Deterministic. Series shorter than ``2 * min_size`` have none.
    """
    raw = np.asarray(values, dtype=float)
    if raw.size < 2 * min_size or not np.all(np.isfinite(raw)):
        return []
    logs = bool(np.all(raw > 0))
    x = np.log(raw) if logs else raw
    found: list[int] = []
    pending = [(0, raw.size)]
    p_values: dict[int, float] = {}
    while pending:
        start, stop = pending.pop()
        if stop - start < 2 * min_size:
            continue
        segment = x[start:stop]
        if np.ptp(segment) == 0.0:
            continue
        split, p_value = _best_split(segment, min_size, simulations)
        if p_value > alpha:
            continue
        found.append(start + split)
        p_values[start + split] = p_value
        pending += [(start, start + split), (start + split, stop)]
    return _described(raw, sorted(found), p_values, min_size, min_change)


def _described(
    raw: np.ndarray, splits: list[int], p_values: dict[int, float], min_size: int, min_change: float
) -> list[ChangePoint]:
    """Levels and location ranges of ``splits`` (each between its neighbours), those past ``min_change``."""
    bounds = [0, *splits, raw.size]
    points = []
    for i, split in enumerate(splits):
        before = raw[bounds[i] : split]
        after = raw[split : bounds[i + 2]]
        window = raw[bounds[i] : bounds[i + 2]]
        window_x = np.log(window) if np.all(window > 0) else window
        earliest, latest = _location_range(window_x, min(min_size, len(before), len(after)), split - bounds[i])
        point = ChangePoint(
            index=split,
            earliest=bounds[i] + earliest,
            latest=bounds[i] + latest,
            before=float(np.median(before)),
            after=float(np.median(after)),
            p_value=p_values[split],
        )
        if abs(point.change) >= min_change:
            points.append(point)
    return points
