"""The measuring loop on the real CPU backend: stop reasons, one measuring thread, cold-cache timing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.judging.stop_rule import stop_rule_for
from pytest_gpuperf.stats import STAT_QUANTILE, quantile, quantile_precision, spread_subset
from pytest_gpuperf.timing import MeasureConfig, measure_time


@pytest.fixture(scope="module")
def cpu() -> CpuBackend:
    """The CPU backend (always available)."""
    return CpuBackend()


@pytest.fixture(scope="module")
def matmul_step():
    """A 96x96 fp32 matmul on random data: a real step of ~0.1 ms."""
    a = torch.randn(96, 96)
    b = torch.randn(96, 96)
    return lambda: a @ b


def test_quantile_matches_numpy_linear_interpolation():
    values = list(np.random.default_rng(0).lognormal(size=37))
    for q in (0.0, 0.1, STAT_QUANTILE, 0.5, 0.9, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)))


def test_quantile_precision_shrinks_with_more_samples_and_is_infinite_below_three():
    rng = np.random.default_rng(1)
    few = list(1.0 + 0.05 * rng.standard_normal(20))
    many = list(1.0 + 0.05 * rng.standard_normal(2000))
    assert quantile_precision(many) < quantile_precision(few) / 3
    assert quantile_precision([1.0, 2.0]) == float("inf")


def test_spread_subset_keeps_the_extremes_and_evenly_spaced_order_statistics():
    values = [float(v) for v in range(100, 0, -1)]
    kept = spread_subset(values, keep=10)
    assert len(kept) == 10 and kept[0] == 1.0 and kept[-1] == 100.0
    assert kept == sorted(kept)
    assert spread_subset([3.0, 1.0, 2.0], keep=10) == [1.0, 2.0, 3.0]


def test_without_a_baseline_sampling_stops_when_precise_or_reports_the_budget(cpu, matmul_step):
    config = MeasureConfig(max_time=0.5, min_samples=5, target_precision=0.5, min_sample_time=0.001)
    result = measure_time(cpu, matmul_step, config)
    assert result.stop == "precise" and not result.budget_exhausted
    assert len(result.samples) >= 5 and result.typical > 0 and result.method == "thread_cpu"
    strict = MeasureConfig(max_time=0.2, min_samples=5, target_precision=1e-9, min_sample_time=0.001)
    exhausted = measure_time(cpu, matmul_step, strict)
    assert exhausted.stop in ("budget", "max_samples")
    assert exhausted.budget_exhausted == (exhausted.stop == "budget")


def test_a_baseline_stop_rule_ends_sampling_once_the_verdict_is_clear(cpu, matmul_step):
    config = MeasureConfig(max_time=1.0, min_samples=6, target_precision=1e-9, min_sample_time=0.001)
    first = measure_time(cpu, matmul_step, config)
    rule = stop_rule_for({"value": first.typical, "samples": first.samples}, 10.0)  # huge tolerance
    assert rule is not None
    second = measure_time(cpu, matmul_step, config, stop_rule=rule)
    assert second.stop == "decided" and len(second.samples) == config.min_samples


def test_l2_flush_times_each_call_after_writing_a_buffer_larger_than_the_cache(cpu, matmul_step):
    # Each flushed sample writes a buffer larger than the last-level cache first; the loose precision ends it after
    # 4 samples. The budget is only a cap far beyond that: 5 s allowed 3 samples at load average 17 on 2 cores.
    config = MeasureConfig(max_time=120.0, min_samples=4, target_precision=0.5, min_sample_time=0.001, l2_flush=True)
    result = measure_time(cpu, matmul_step, config)
    assert result.method == "l2_flush" and len(result.samples) >= 4
    assert result.typical > 0


def test_cpu_steps_are_timed_on_one_thread_by_default_and_the_users_threads_are_restored(cpu, matmul_step):
    config = MeasureConfig(max_time=0.2, min_samples=4, target_precision=0.5, min_sample_time=0.001)
    threads = torch.get_num_threads()
    seen: list[int] = []
    torch.set_num_threads(2)
    try:
        result = measure_time(cpu, lambda: seen.append(torch.get_num_threads()), config)
        assert set(seen) == {1} and result.cpu_threads == 1 and result.method == "thread_cpu"
        assert torch.get_num_threads() == 2  # the test's own setting is back
        assert result.summary()["cpu_threads"] == 1
        wall = MeasureConfig(max_time=0.2, min_samples=4, target_precision=0.5, cpu_clock="wall")
        assert measure_time(cpu, matmul_step, wall).method == "events"
        seen.clear()
        own = MeasureConfig(max_time=0.2, min_samples=4, target_precision=0.5, cpu_threads=0)
        result = measure_time(cpu, lambda: seen.append(torch.get_num_threads()), own)
        assert set(seen) == {2} and result.cpu_threads == 2 and result.method == "events"
    finally:
        torch.set_num_threads(threads)
