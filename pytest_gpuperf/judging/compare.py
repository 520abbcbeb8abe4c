"""Noise-aware judging of one metric against its baseline entry.

* memory: a plain relative tolerance (the allocator's peak is deterministic),
  plus a small absolute slack so a few KiB on a tiny test never fail it;
* time and throughput: the run's samples against the baseline's stored samples.
  The judged statistic is a low quantile of the per-step times
  (:data:`~pytest_gpuperf.stats.STAT_QUANTILE`; the mirror quantile for
  throughputs), robust to samples slowed by preemption. The ratio run/baseline
  gets a bootstrap 95% confidence interval; a change is a regression only when
  the point estimate is past the tolerance *and* the interval excludes "no
  change". The ratios are raw: nothing rescales them;
* categories (the memory-/compute-/latency-bound verdict): any change fails;
* counted work (FLOPs, bytes per step): less work beyond counting noise is an improvement, more work fails
  (:mod:`pytest_gpuperf.judging.work`);
* a noisy metric (host overhead, host-CPU times) improves only beyond the spread between the baseline's processes
  (:mod:`pytest_gpuperf.judging.gains`), as a regression must be confirmed in a fresh process;
* custom metrics: the point value against the tolerance in the metric's ``better`` direction
  (:mod:`pytest_gpuperf.judging.ratio_rule`, the rule the A/B judge shares).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.judging.gains import WITHIN_SPREAD, gain_doubt
from pytest_gpuperf.judging.ratio_rule import point_status, value_ratio, within_memory_slack, worse_ratio
from pytest_gpuperf.results import KIND_CATEGORY, KIND_WORK, SAMPLED_KINDS, Metric, Verdict
from pytest_gpuperf.stats import judged_quantile
from pytest_gpuperf.units import format_change, format_value

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class RatioEstimate:
    """Ratio of a statistic (run / baseline) with its bootstrap confidence interval."""

    ratio: float
    low: float
    high: float


def ratio_of_quantiles(run: Sequence[float], base: Sequence[float], q: float, seed: int = 0) -> RatioEstimate:
    """Bootstrap the ratio ``quantile(run, q) / quantile(base, q)``; both need at least 3 samples."""
    import numpy as np

    rng = np.random.default_rng(seed)
    run_arr = np.asarray(run, dtype=float)
    base_arr = np.asarray(base, dtype=float)
    run_idx = rng.integers(0, len(run_arr), size=(BOOTSTRAP_RESAMPLES, len(run_arr)))
    base_idx = rng.integers(0, len(base_arr), size=(BOOTSTRAP_RESAMPLES, len(base_arr)))
    ratios = np.quantile(run_arr[run_idx], q, axis=1) / np.quantile(base_arr[base_idx], q, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    point = float(np.quantile(run_arr, q) / np.quantile(base_arr, q))
    return RatioEstimate(point, float(low), float(high))


def _describe(metric: Metric, baseline_value: Any, ratio: float, tolerance: float, where: str, extra: str = "") -> str:
    sign = "=" if ratio == 1.0 else (">" if ratio > 1.0 else "<")
    measured = format_value(metric.value, metric.unit)
    base = format_value(baseline_value, metric.unit)
    change = "from 0" if ratio == float("inf") else format_change(ratio)
    detail = f"{change}{extra}, tolerance {tolerance:.0%}"
    return f"{metric.label()} {measured} {sign} baseline {base} ({detail}) on {where}"


def judge(metric: Metric, entry: dict[str, Any] | None, tolerance: float, where: str, node_id: str = "") -> Verdict:
    """Judge ``metric`` against a baseline ``entry`` (None: no baseline yet); ``node_id`` names the test in a
    command a message recommends."""
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
    if metric.kind == KIND_WORK:
        from pytest_gpuperf.judging.work import judge_work

        return judge_work(metric, entry, tolerance, where, node_id)
    assert isinstance(metric.value, (int, float)) and isinstance(base_value, (int, float))
    if metric.kind in SAMPLED_KINDS:
        return _judge_samples(metric, entry, tolerance, where)
    ratio = value_ratio(float(metric.value), float(base_value))
    status = point_status(ratio, metric.better, tolerance)
    if within_memory_slack(metric.kind, metric.value, base_value):
        status = "unchanged"
    message = _describe(metric, base_value, ratio, tolerance, where)
    hint = metric.extra.get("regression_hint")
    if status == "regression" and isinstance(hint, str):
        message = f"{message}: {hint}"
    return Verdict(metric, status, baseline=base_value, ratio=ratio, tolerance=tolerance, message=message)


def status_of(ratio: float, low: float, high: float, better: str, tolerance: float) -> str:
    """regression / improvement / unchanged for one ratio estimate: the point past the tolerance
    (:func:`~pytest_gpuperf.judging.ratio_rule.point_status`) and its interval excluding "no change"."""
    status = point_status(ratio, better, tolerance)
    worse_low, worse_high = sorted((worse_ratio(low, better), worse_ratio(high, better)))
    if (status == "regression" and worse_low > 1.0) or (status == "improvement" and worse_high < 1.0):
        return status
    return "unchanged"


def _estimate(run: Sequence[float], base: Sequence[float], q: float, fallback: float) -> RatioEstimate:
    if len(run) >= 3 and len(base) >= 3:
        return ratio_of_quantiles(run, base, q)
    return RatioEstimate(fallback, fallback, fallback)


def _judge_samples(metric: Metric, entry: dict[str, Any], tolerance: float, where: str) -> Verdict:
    base_value = float(entry["value"])
    q = judged_quantile(metric.better)
    point = float(metric.value) / base_value if base_value else float("inf")
    estimate = _estimate(metric.samples, entry.get("samples") or [], q, point)
    # The change shown is value / baseline (the numbers printed beside it); the bootstrap gives its interval,
    # re-centred on it (stored samples are a subset, so their quantile can differ slightly from the value).
    scale = point / estimate.ratio if estimate.ratio > 0 and point not in (0.0, float("inf")) else 1.0
    shown = RatioEstimate(point, estimate.low * scale, estimate.high * scale)
    extra = f", 95% CI {format_change(shown.low)}..{format_change(shown.high)}"
    status = status_of(shown.ratio, shown.low, shown.high, metric.better, tolerance)
    slack = metric.extra.get("abs_slack")
    if isinstance(slack, (int, float)) and status != "unchanged" and abs(float(metric.value) - base_value) <= slack:
        status = "unchanged"  # a change below the metric's absolute slack (host overhead hidden behind the device)
        extra += f"; within {format_value(slack, metric.unit)} of it"
    metric.extra.pop(WITHIN_SPREAD, None)  # an earlier judgement's note
    if status == "improvement":
        doubt = gain_doubt(metric, entry, (shown.low, shown.high))
        if doubt:  # a noisy metric's gain inside the spread between processes: one fast process reads as much
            status, extra = "unchanged", f"{extra}; {doubt}"
            metric.extra[WITHIN_SPREAD] = doubt
    if metric.extra.get("budget_exhausted"):
        extra += f"; undecided when the {metric.extra.get('measure_seconds', '?')} s budget ran out"
    return Verdict(
        metric,
        status,  # type: ignore[arg-type]
        baseline=base_value,
        ratio=shown.ratio,
        ci=(shown.low, shown.high),
        tolerance=tolerance,
        message=_describe(metric, base_value, shown.ratio, tolerance, where, extra),
    )
