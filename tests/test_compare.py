"""Judging time samples against a baseline's distribution: quantile ratios, CIs, raw ratios (no drift rescaling)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.judging.compare import judge, ratio_of_quantiles
from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Metric
from pytest_gpuperf.stats import STAT_QUANTILE, judged_quantile, quantile

WHERE = "test machine"


def _noisy(center: float, n: int, seed: int, spread: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in center * (1.0 + spread * rng.standard_normal(n))]


def _time_metric(samples: list[float]) -> Metric:
    value = quantile(samples, STAT_QUANTILE)
    return Metric("step.time", value, "s", "lower", KIND_TIME, samples)


def _entry(samples: list[float]) -> dict:
    return {
        "value": quantile(samples, STAT_QUANTILE),
        "unit": "s",
        "better": "lower",
        "kind": "time",
        "samples": samples,
    }


def test_the_ratio_of_quantiles_has_a_ci_around_the_true_ratio():
    base = _noisy(1.0, 40, 0)
    run = _noisy(1.10, 40, 1)
    estimate = ratio_of_quantiles(run, base, STAT_QUANTILE)
    assert estimate.low < 1.10 < estimate.high
    assert estimate.ratio == pytest.approx(quantile(run, STAT_QUANTILE) / quantile(base, STAT_QUANTILE))
    assert estimate.high - estimate.low < 0.03


def test_throughputs_are_judged_on_their_fast_side():
    assert judged_quantile("lower") == STAT_QUANTILE
    assert judged_quantile("higher") == pytest.approx(1.0 - STAT_QUANTILE)


def test_a_slowdown_past_tolerance_with_a_ci_excluding_one_is_a_regression():
    verdict = judge(_time_metric(_noisy(1.2, 30, 2)), _entry(_noisy(1.0, 30, 3)), 0.05, WHERE)
    assert verdict.status == "regression"
    assert verdict.ci is not None and verdict.ci[0] > 1.0
    assert "tolerance 5%" in verdict.message and WHERE in verdict.message


def test_noise_alone_is_unchanged_even_when_the_point_estimate_is_past_tolerance():
    base = _noisy(1.0, 8, 4, spread=0.4)
    run = _noisy(1.08, 8, 5, spread=0.4)
    verdict = judge(_time_metric(run), _entry(base), 0.05, WHERE)
    assert verdict.status == "unchanged"


def test_old_baselines_with_drift_normalized_samples_are_judged_on_raw_times():
    base = _noisy(1.0, 30, 10)
    run = _noisy(1.3, 30, 11)
    entry = {**_entry(base), "normalized": [s / 0.5 for s in base], "reference": "copy"}
    verdict = judge(_time_metric(run), entry, 0.05, WHERE)
    assert verdict.status == "regression"  # a probe's ratio never rescales the judged one
    assert "drift" not in verdict.message and "probe" not in verdict.message


def test_a_uniformly_slower_run_is_a_regression_no_probe_excuses_it():
    verdict = judge(_time_metric(_noisy(1.5, 30, 7)), _entry(_noisy(1.0, 30, 6)), 0.05, WHERE)
    assert verdict.status == "regression"
    assert verdict.ratio == pytest.approx(1.5, rel=0.03)


def test_throughput_drop_is_a_regression_and_a_rise_an_improvement():
    base = _noisy(1000.0, 30, 12)
    entry = {"value": quantile(base, 0.8), "samples": base, "better": "higher", "kind": KIND_THROUGHPUT}
    for center, status in ((800.0, "regression"), (1300.0, "improvement"), (1000.0, "unchanged")):
        run = _noisy(center, 30, 13)
        metric = Metric("step.throughput", quantile(run, 0.8), "items/s", "higher", KIND_THROUGHPUT, run)
        assert judge(metric, entry, 0.05, WHERE).status == status


def test_an_exhausted_budget_is_reported_in_the_verdict():
    metric = _time_metric(_noisy(1.0, 30, 14))
    metric.extra.update({"budget_exhausted": True, "measure_seconds": 2.1})
    verdict = judge(metric, _entry(_noisy(1.0, 30, 15)), 0.05, WHERE)
    assert "undecided when the 2.1 s budget ran out" in verdict.message
