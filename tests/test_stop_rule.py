"""The stop rule: sampling ends once the run's samples can decide against the baseline (injected samples)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.judging.stop_rule import stop_rule_for
from pytest_gpuperf.timing import TimingResult


def _result(samples: list[float]) -> TimingResult:
    return TimingResult(samples=samples)


def test_stop_rule_is_decided_when_clearly_within_or_clearly_past_the_tolerance():
    rng = np.random.default_rng(2)
    base = list(1.0 + 0.01 * rng.standard_normal(30))
    rule = stop_rule_for({"value": 1.0, "samples": base}, 0.05)
    assert rule is not None
    assert rule.decided(_result(list(1.0 + 0.01 * rng.standard_normal(20))))  # same speed
    assert rule.decided(_result(list(1.3 + 0.01 * rng.standard_normal(20))))  # 30% slower
    wide = list(1.03 * (1.0 + 0.2 * np.abs(rng.standard_normal(20))))  # near the limit, very noisy
    assert not rule.decided(_result(wide))


def test_stop_rule_for_throughput_reads_run_times_as_items_per_second():
    base = [1000.0 / t for t in (0.010, 0.0101, 0.0099, 0.0100, 0.0102)]
    rule = stop_rule_for({"value": 100000.0, "samples": base, "better": "higher"}, 0.05, items=1000.0)
    assert rule is not None
    assert rule.run_values(_result([0.01, 0.02])) == pytest.approx([100000.0, 50000.0])
    assert rule.decided(_result([0.02] * 10))  # half the throughput: clearly past


def test_no_stop_rule_without_enough_baseline_samples():
    assert stop_rule_for(None, 0.05) is None
    assert stop_rule_for({"value": 1.0, "samples": [1.0, 1.0]}, 0.05) is None


def test_old_baselines_with_drift_normalized_samples_plan_on_raw_samples_only():
    entry = {"value": 1.0, "samples": [1.0] * 5, "normalized": [2.0] * 5, "reference": "copy"}
    rule = stop_rule_for(entry, 0.05)
    assert rule is not None and rule.decided(_result([1.0] * 10))
