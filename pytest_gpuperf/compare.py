"""Noise-aware judging of one metric against its baseline entry.

* memory: a plain relative tolerance (the allocator's peak is deterministic),
  plus a small absolute slack so a few KiB on a tiny test never fail it;
* time and throughput: the run's samples against the baseline's stored samples.
  The ratio of medians gets a bootstrap 95% confidence interval; a change is a
  regression only when the point estimate is past the tolerance *and* the
  interval excludes "no change". When both sides carry drift-normalized samples
  (step time / interleaved reference time) those are judged instead of raw
  times, so a uniformly slower machine does not read as a regression;
* categories (the memory-/compute-/latency-bound verdict): any change fails;
* custom metrics: the point value against the tolerance in the metric's ``better`` direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.results import KIND_CATEGORY, KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict
from pytest_gpuperf.units import format_change, format_value

MEMORY_SLACK_BYTES = 64 * 1024
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class RatioEstimate:
    """Ratio of medians (run / baseline) with its bootstrap confidence interval."""

    ratio: float
    low: float
    high: float


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def ratio_of_medians(run: Sequence[float], base: Sequence[float], seed: int = 0) -> RatioEstimate:
    """Bootstrap the ratio ``median(run) / median(base)``; both need at least 3 samples."""
    import numpy as np

    rng = np.random.default_rng(seed)
    run_arr = np.asarray(run, dtype=float)
    base_arr = np.asarray(base, dtype=float)
    run_idx = rng.integers(0, len(run_arr), size=(BOOTSTRAP_RESAMPLES, len(run_arr)))
    base_idx = rng.integers(0, len(base_arr), size=(BOOTSTRAP_RESAMPLES, len(base_arr)))
    ratios = np.median(run_arr[run_idx], axis=1) / np.median(base_arr[base_idx], axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return RatioEstimate(float(np.median(run_arr) / np.median(base_arr)), float(low), float(high))


def _worse_ratio(ratio: float, better: str) -> float:
    """Express a ratio so that > 1 always means worse."""
    return ratio if better == "lower" else 1.0 / ratio


def _describe(metric: Metric, baseline_value: Any, ratio: float, tolerance: float, where: str, extra: str = "") -> str:
    worse = _worse_ratio(ratio, metric.better) > 1.0
    sign = ">" if (ratio > 1.0) else "<"
    if ratio == 1.0:
        sign = "="
    direction = "regressed" if worse else "improved"
    del direction
    measured = format_value(metric.value, metric.unit)
    base = format_value(baseline_value, metric.unit)
    detail = f"{format_change(ratio)}{extra}, tolerance {tolerance:.0%}"
    return f"{metric.label()} {measured} {sign} baseline {base} ({detail}) on {where}"


def judge(metric: Metric, entry: dict[str, Any] | None, tolerance: float, where: str) -> Verdict:
    """Judge ``metric`` against a baseline ``entry`` (None: no baseline yet)."""
    if not metric.judged:
        return Verdict(metric, "info", baseline=(entry or {}).get("value"))
    if entry is None:
        return Verdict(metric, "new", tolerance=tolerance, message=f"{metric.label()}: no baseline on {where}")
    base_value = entry.get("value")
    if metric.kind == KIND_CATEGORY or isinstance(metric.value, str) or isinstance(base_value, str):
        if metric.value == base_value:
            return Verdict(metric, "unchanged", baseline=base_value)
        return Verdict(
            metric,
            "changed",
            baseline=base_value,
            message=f"{metric.label()} changed: {base_value} -> {metric.value} on {where}",
        )
    assert isinstance(metric.value, (int, float)) and isinstance(base_value, (int, float))
    if metric.kind in (KIND_TIME, KIND_THROUGHPUT):
        return _judge_samples(metric, entry, tolerance, where)
    if base_value == 0:
        ratio = 1.0 if metric.value == 0 else float("inf")
    else:
        ratio = float(metric.value) / float(base_value)
    worse = _worse_ratio(ratio, metric.better) if ratio not in (0.0, float("inf")) else ratio
    status = "unchanged"
    if metric.better == "equal":
        status = "unchanged" if abs(ratio - 1.0) <= tolerance else "regression"
    elif worse > 1.0 + tolerance:
        status = "regression"
    elif worse < 1.0 / (1.0 + tolerance):
        status = "improvement"
    if metric.kind == KIND_MEMORY and abs(float(metric.value) - float(base_value)) <= MEMORY_SLACK_BYTES:
        status = "unchanged"
    return Verdict(
        metric,
        status,
        baseline=base_value,
        ratio=ratio,
        tolerance=tolerance,
        message=_describe(metric, base_value, ratio, tolerance, where),
    )


def _judge_samples(metric: Metric, entry: dict[str, Any], tolerance: float, where: str) -> Verdict:
    base_value = float(entry["value"])
    normalized = bool(metric.normalized) and len(entry.get("normalized", [])) >= 3
    run = metric.normalized if normalized else metric.samples
    base = entry.get("normalized", []) if normalized else entry.get("samples", [])
    raw_ratio = float(metric.value) / base_value if base_value else float("inf")
    if len(run) >= 3 and len(base) >= 3:
        est = ratio_of_medians(run, base)
        ratio, low, high = est.ratio, est.low, est.high
    else:
        ratio, low, high = raw_ratio, raw_ratio, raw_ratio
    worse = _worse_ratio(ratio, metric.better)
    worse_low, worse_high = sorted((_worse_ratio(low, metric.better), _worse_ratio(high, metric.better)))
    status = "unchanged"
    if worse > 1.0 + tolerance and worse_low > 1.0:
        status = "regression"
    elif worse < 1.0 / (1.0 + tolerance) and worse_high < 1.0:
        status = "improvement"
    extra = f", 95% CI {format_change(low)}..{format_change(high)}"
    if normalized:
        extra += f", drift-corrected; raw {format_change(raw_ratio)}"
    return Verdict(
        metric,
        status,
        baseline=base_value,
        ratio=ratio,
        ci=(low, high),
        tolerance=tolerance,
        message=_describe(metric, base_value, ratio, tolerance, where, extra),
    )
