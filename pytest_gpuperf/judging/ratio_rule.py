"""The ratio rule: one change (run / baseline, or B / A) against its tolerance, in the metric's direction.

Shared by both judges: :mod:`.compare` (a run against its stored baseline) and :mod:`pytest_gpuperf.ab.judge`
(the working tree's processes against REF's). A ratio is first oriented so that > 1 always means worse
(:func:`worse_ratio`); past ``1 + tolerance`` it is a regression, better than ``1 / (1 + tolerance)`` an
improvement (:func:`point_status`). A peak-memory change within :data:`~pytest_gpuperf.results.MEMORY_SLACK_BYTES`
never counts (:func:`within_memory_slack`): the allocator's granularity, not the code.
"""

from __future__ import annotations

import math

from pytest_gpuperf.results import KIND_MEMORY, MEMORY_SLACK_BYTES


def worse_ratio(ratio: float, better: str) -> float:
    """``ratio`` oriented so that > 1 always means worse: inverted when higher is better (0 <-> inf)."""
    if better != "higher":
        return ratio
    if ratio == 0.0:
        return math.inf
    return 0.0 if math.isinf(ratio) else 1.0 / ratio


def value_ratio(value: float, base: float) -> float:
    """``value / base``; from a base of 0: 1 when the value is 0 too, else inf."""
    if base == 0:
        return 1.0 if value == 0 else math.inf
    return float(value) / float(base)


def point_status(ratio: float, better: str, tolerance: float) -> str:
    """regression / improvement / unchanged of one ``ratio`` (run / baseline) against ``tolerance``.

    ``better`` "equal": any change past the tolerance either way fails.
    """
    if better == "equal":
        return "unchanged" if abs(ratio - 1.0) <= tolerance else "regression"
    worse = worse_ratio(ratio, better)
    if worse > 1.0 + tolerance:
        return "regression"
    if worse < 1.0 / (1.0 + tolerance):
        return "improvement"
    return "unchanged"


def within_memory_slack(kind: str, value: float, base: float) -> bool:
    """True for a peak-memory change too small to count, whatever its ratio."""
    return kind == KIND_MEMORY and abs(float(value) - float(base)) <= MEMORY_SLACK_BYTES
