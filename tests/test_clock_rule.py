"""The clock rule, the power warm-up and host overhead, from injected samples and NVML readings."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.context import build_context
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.results import KIND_CATEGORY, KIND_CYCLES, KIND_HOST, KIND_THROUGHPUT, Metric
from pytest_gpuperf.stats import STAT_QUANTILE, quantile
from pytest_gpuperf.timing.cuda.nvml import ClockReading, ClockWatch
from pytest_gpuperf.timing.cuda.power_state import warm_to_sustained
from tests.test_judging import NODE, FakeBackend, settings
from tests.test_verdicts import entry, samples, time_metric

#: A compute-bound step of 1,250,000 cycles per step (the H200 GEMM of gpu/clock_traces.py: ~836 us at 1500 MHz).
CYCLES = 1.25e6


def _at(clock_mhz: float, work: float, seed: int) -> tuple[Metric, Metric]:
    """The time and cycles metrics of ``work`` x CYCLES cycles per step run at ``clock_mhz`` (per-sample noise)."""
    cycles = samples(CYCLES * work, seed)
    times = [c / (clock_mhz * 1e6) for c in cycles]
    time = time_metric(times, sm_clock_mhz=clock_mhz, mem_clock_mhz=3201)
    cyc = Metric("step.cycles", quantile(cycles, STAT_QUANTILE), "cycles", "lower", KIND_CYCLES, cycles, judged=False)
    return time, cyc


def _entries(clock_mhz: float, seed: int = 1) -> dict[str, dict[str, Any]]:
    time, cycles = _at(clock_mhz, 1.0, seed)
    return {
        "step.time": entry(time.samples, sm_clock_mhz=clock_mhz, mem_clock_mhz=3201),
        "step.cycles": {"value": cycles.value, "unit": "cycles", "better": "lower", "kind": "cycles",
                        "samples": cycles.samples},
    }  # fmt: skip


def _judge(tmp_path: Path, metrics: list[Metric], entries: dict[str, dict[str, Any]], **over: Any) -> list[Any]:
    judging = Judging(settings(tmp_path, **over), FixedBaselines(entries))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    return judging.judge(context, metrics)


def test_the_same_work_at_another_sm_clock_is_unchanged_on_cycles_not_inconclusive(tmp_path: Path) -> None:
    # The baseline ran at 1485 MHz, this run at 1650 MHz: time -10% (the 0.894-0.899 ratios), cycles equal.
    time, cycles = _at(1650, 1.0, 2)
    verdict = _judge(tmp_path, [time, cycles], _entries(1485))[0]
    assert verdict.status == "unchanged", verdict.message
    assert "cycles per step" in verdict.message and "1650 MHz (baseline 1485 MHz)" in verdict.message
    assert "neither past it" in verdict.message and time.extra["judged_on"] == "time+cycles"


def test_time_and_cycles_that_straddle_the_tolerance_are_inconclusive_never_a_pass(tmp_path: Path) -> None:
    # +10% of the work at a 10% higher clock: the time alone looks unchanged, the cycles say +10%. The work changed
    # by between the two (a step's time follows the clock only partly), so neither a pass nor a failure is evidence.
    time, cycles = _at(1650, 1.10, 3)
    assert abs(time.value / _entries(1485)["step.time"]["value"] - 1.0) < 0.03
    verdict = _judge(tmp_path, [time, cycles], _entries(1485))[0]
    assert verdict.status == "inconclusive" and verdict.suspected == "regression" and verdict.doubt == "clock"
    assert "straddles the tolerance" in verdict.message and "--gpuperf-ab" in verdict.message


def test_a_slowdown_at_a_lower_clock_is_caught_by_cycles_at_its_own_size(tmp_path: Path) -> None:
    time, cycles = _at(1400, 1.06, 4)  # time +13.6%, of which 6% is the work
    verdict = _judge(tmp_path, [time, cycles], _entries(1485))[0]
    assert verdict.status == "regression" and "+6" in verdict.message and "both past it" in verdict.message


def test_a_throughput_verdict_follows_the_cycles_in_its_own_direction(tmp_path: Path) -> None:
    time, cycles = _at(1400, 1.10, 5)
    base = _entries(1485)
    items = 1000.0
    rates = [items / t for t in time.samples]
    throughput = Metric("step.throughput", items / time.value, "items/s", "higher", KIND_THROUGHPUT, rates,
                        extra={"sm_clock_mhz": 1400})  # fmt: skip
    base["step.throughput"] = {"value": items / base["step.time"]["value"], "unit": "items/s", "better": "higher",
                               "kind": "throughput", "sm_clock_mhz": 1485,
                               "samples": [items / t for t in base["step.time"]["samples"]]}  # fmt: skip
    verdicts = {v.metric.name: v for v in _judge(tmp_path, [time, throughput, cycles], base)}
    assert verdicts["step.throughput"].status == "regression"
    assert verdicts["step.throughput"].ratio < 0.90  # the throughput's own change, both measures past the tolerance


def test_within_the_clock_band_time_decides_and_cycles_are_only_shown(tmp_path: Path) -> None:
    time, cycles = _at(1500, 1.0, 6)  # 1% off the baseline's clock: no clock change
    verdicts = _judge(tmp_path, [time, cycles], _entries(1485))
    assert [v.status for v in verdicts] == ["unchanged", "info"]
    assert "judged_on" not in time.extra


def test_a_memory_bound_step_keeps_its_time_verdict_at_another_sm_clock(tmp_path: Path) -> None:
    base = _entries(1980)
    times = base["step.time"]["samples"]
    time = time_metric(list(times), sm_clock_mhz=1500, mem_clock_mhz=3201)  # same time: HBM-bound
    cycles = Metric("step.cycles", 1.0, "cycles", "lower", KIND_CYCLES, [t * 1500e6 for t in times], judged=False)
    bound = Metric("step.bound", "memory-bound", "", "equal", KIND_CATEGORY)
    verdict = _judge(tmp_path, [time, cycles, bound], base)[0]
    assert verdict.status == "unchanged" and "cycles" not in verdict.message
    moved = time_metric(list(times), sm_clock_mhz=1980, mem_clock_mhz=2619, bound="memory-bound")
    verdict = _judge(tmp_path, [moved], base)[0]
    assert verdict.status == "inconclusive" and "memory clock was 2619 MHz" in verdict.message


def test_an_old_baseline_without_cycles_stays_inconclusive_and_says_to_re_record(tmp_path: Path) -> None:
    time, _ = _at(1650, 1.0, 7)
    base = {"step.time": _entries(1485)["step.time"]}
    verdict = _judge(tmp_path, [time], base)[0]
    assert verdict.status == "inconclusive" and "stores no cycles per step" in verdict.message


def test_a_throttled_gpu_is_inconclusive_even_when_cycles_could_judge(tmp_path: Path) -> None:
    time, cycles = _at(1300, 1.0, 8)
    time.extra.update(throttled=True, clock_events="hw_thermal_slowdown")
    verdict = _judge(tmp_path, [time, cycles], _entries(1485))[0]
    assert verdict.status == "inconclusive" and "throttled" in verdict.message


def _reader(clocks: list[int], powers: list[float], reasons: int = 0x4):
    it = itertools.chain(zip(clocks, powers, strict=True), itertools.repeat((clocks[-1], powers[-1])))
    return lambda: (lambda c, p: ClockReading(c, reasons, 60, 3201, p))(*next(it))


def test_the_power_warm_up_keeps_replaying_while_a_capped_gpus_power_still_rises() -> None:
    clock = itertools.count(0.0, 0.01)  # 10 ms per clock read: 5 reads (replays) per 0.1 s window
    powers = [100.0 + 60.0 * i for i in range(10)]  # rises 300 W per window for 2 windows, then holds
    reader = _reader([1500] * 10, powers)
    state = warm_to_sustained(lambda: None, reader, budget=2.0, now=lambda: next(clock))
    assert state.settled and state.power_capped and state.sm_clock_mhz == 1500
    assert 0.25 < state.seconds < 0.6  # settled in the first two windows after the power stopped rising
    assert state.facts()["power_settled"] is True


def test_a_boost_clock_that_holds_while_the_power_still_climbs_is_not_yet_the_sustained_state() -> None:
    clock = itertools.count(0.0, 0.01)  # 5 reads per 0.1 s window
    powers = [90.0 + 30.0 * i for i in range(20)] + [690.0] * 10  # climbs 150 W per window for 4 windows, uncapped
    clocks = [1980] * 20 + [1500] * 10  # the boost clock holds until the cap engages
    reader = _reader(clocks, powers, reasons=0)
    state = warm_to_sustained(lambda: None, reader, budget=2.0, now=lambda: next(clock))
    assert state.settled and state.sm_clock_mhz == 1500  # not the boost clock of the first windows
    assert state.seconds > 0.4


def test_an_uncapped_gpu_settles_as_soon_as_its_clock_holds_and_a_drifting_one_runs_out_of_budget() -> None:
    clock = itertools.count(0.0, 0.01)
    state = warm_to_sustained(lambda: None, _reader([1980], [300.0], reasons=0), 2.0, now=lambda: next(clock))
    assert state.settled and not state.power_capped and state.seconds < 0.3
    clock = itertools.count(0.0, 0.01)
    drifting = _reader(list(range(1900, 1000, -10)), [690.0] * 90)  # the clock keeps falling 2% per window
    state = warm_to_sustained(lambda: None, drifting, 0.5, now=lambda: next(clock))
    assert not state.settled and state.seconds >= 0.5


def test_a_clock_watch_gives_every_timed_sample_the_mean_clock_read_around_it() -> None:
    readings = iter([ClockReading(1500, 4, 60, 3201, 690.0), ClockReading(1520, 4, 60, 3201, 691.0)] * 3)
    watch = ClockWatch(lambda: next(readings))
    take = watch.timed(lambda: 1e-3)
    assert [take() for _ in range(3)] == [1e-3] * 3
    assert watch.sample_clocks == [1510.0] * 3
    summary = watch.summary()
    assert summary["sm_clock_mhz"] == 1510.0 and summary["mem_clock_mhz"] == 3201 and summary["power_capped"]


def _host(median_s: float, seed: int, eager: float) -> Metric:
    values = samples(median_s, seed, spread=0.02)
    return Metric("step.host_overhead", quantile(values, 0.5), "s", "lower", KIND_HOST, values,
                  extra={"eager_time": eager, "abs_slack": 0.05 * eager})  # fmt: skip


def _host_entry(median_s: float, seed: int) -> dict[str, Any]:
    values = samples(median_s, seed, spread=0.02)
    return {"value": quantile(values, 0.5), "unit": "s", "better": "lower", "kind": "host", "samples": values}


def test_a_new_host_sync_fails_on_host_overhead_at_its_own_tolerance(tmp_path: Path) -> None:
    # The seed's Linear with one .item() per step: host overhead 302 -> 404 us (+34%), eager 510 -> 603 us.
    base = {"step.host_overhead": _host_entry(302e-6, 1)}
    [verdict] = _judge(tmp_path, [_host(404e-6, 2, 603e-6)], base)
    assert verdict.status == "regression" and verdict.tolerance == pytest.approx(0.25)
    assert "host overhead" in verdict.message
    [same] = _judge(tmp_path, [_host(310e-6, 3, 515e-6)], base)
    assert same.status == "unchanged"
    [looser] = _judge(tmp_path, [_host(404e-6, 2, 603e-6)], base, host_tolerance=0.5)
    assert looser.status == "unchanged"


def test_a_device_bound_steps_tiny_host_overhead_never_fails_on_its_noise(tmp_path: Path) -> None:
    # 2 us -> 6 us of overhead behind an 800 us device step: +200%, but 0.5% of the step.
    base = {"step.host_overhead": _host_entry(2e-6, 4)}
    [verdict] = _judge(tmp_path, [_host(6e-6, 5, 806e-6)], base)
    assert verdict.status == "unchanged" and "within" in verdict.message


def test_a_new_host_sync_per_step_fails_exactly_on_the_sync_count(tmp_path: Path) -> None:
    from pytest_gpuperf.timing.metrics import host_sync_metrics

    assert host_sync_metrics("step", None) == []  # a backend that cannot count adds nothing
    base = {"step.host_syncs": {"value": 0, "unit": "", "better": "lower", "kind": "custom"}}
    [verdict] = _judge(tmp_path, host_sync_metrics("step", 1), base)
    assert verdict.status == "regression" and verdict.tolerance == 0.0
    assert "host syncs 1 > baseline 0 (from 0" in verdict.message and "host overhead" in verdict.message
    [same] = _judge(tmp_path, host_sync_metrics("step", 0), base)
    assert same.status == "unchanged"


# -- the clock-exponent band: how far a step's own time followed its own SM clock ----------------------------------
def test_the_power_law_fit_recovers_the_exponent_and_refuses_a_clock_that_did_not_move() -> None:
    from pytest_gpuperf.stats import power_law_exponent

    clocks = [1400.0 + 20.0 * (i % 10) for i in range(40)]
    jitter = [1.0 + 0.002 * ((i * 7) % 5 - 2) for i in range(40)]  # deterministic, +-0.4%
    times = [2e-4 * (f / 1500.0) ** -0.3 * j for f, j in zip(clocks, jitter, strict=True)]
    a, se = power_law_exponent(clocks, times) or (0.0, 1.0)
    assert abs(a - 0.3) < 3 * se and se < 0.05
    assert power_law_exponent([1500.0] * 40, times) is None  # one clock: nothing to fit
    assert power_law_exponent(clocks[:5], times[:5]) is None  # too few samples


def test_a_timing_record_writes_its_own_clock_exponent_into_its_facts() -> None:
    from pytest_gpuperf.timing.sampling import TimingResult

    clocks = [1380.0 + 15.0 * (i % 12) for i in range(36)]
    result = TimingResult(samples=[2e-4 * (f / 1500.0) ** -0.5 for f in clocks])
    result.sample_clocks = clocks
    facts = result.summary()
    assert facts["clock_exponent"] == pytest.approx(0.5, abs=1e-3) and facts["clock_exponent_se"] < 1e-3
    result.samples = [2e-4 * (f / 1500.0) ** 0.2 for f in clocks]  # faster at a lower clock: noise, stored as 0
    assert result.summary()["clock_exponent"] == 0.0


def _gemm_run(time_ratio: float, clock: float, fit: tuple[float, float]) -> Metric:
    """A GEMM's time metric ``time_ratio`` x the baseline's, read at ``clock`` MHz, with its own exponent fit."""
    times = [t * time_ratio for t in samples(2.0e-4, 7)]
    return time_metric(times, sm_clock_mhz=clock, clock_exponent=fit[0], clock_exponent_se=fit[1])


def _gemm_baseline(clock: float, fit: tuple[float, float]) -> dict[str, dict[str, Any]]:
    base = entry(samples(2.0e-4, 1), sm_clock_mhz=clock, clock_exponent=fit[0], clock_exponent_se=fit[1])
    return {"step.time": base}


# Both cases are H200 runs (gpu/r4_call4.sh) that the time+cycles bracket left inconclusive: the GEMM's time follows
# the NVML clock as f**-0.2..0.4, cycles assume f**-1.
def test_a_slowdown_read_at_a_much_higher_clock_fails_over_the_exponent_band(tmp_path: Path) -> None:
    # +9.4% of the work read as time +3.8% at 1650 MHz against a baseline at 1410 MHz: the band [0.15, 0.56] of the
    # two fits puts the work at +6.3%..+13%.
    run = _gemm_run(1.038, 1650, (0.29, 0.07))
    verdict = _judge(tmp_path, [run], _gemm_baseline(1410, (0.39, 0.087)))[0]
    assert verdict.status == "regression", verdict.message
    assert "f^-0.15..f^-0.56" in verdict.message and "both ends past it" in verdict.message
    assert run.extra["judged_on"] == "time+clock exponent" and run.extra["work_change"][0] > 1.05


def test_unchanged_work_at_a_higher_clock_passes_over_the_exponent_band(tmp_path: Path) -> None:
    run = _gemm_run(0.999, 1530, (0.25, 0.10))  # time -0.1% at 1530 MHz against 1410: cycles said +8%
    verdict = _judge(tmp_path, [run], _gemm_baseline(1410, (0.39, 0.087)))[0]
    assert verdict.status == "unchanged" and "neither end past it" in verdict.message, verdict.message


def test_a_fit_too_loose_to_narrow_the_band_leaves_a_straddle_inconclusive(tmp_path: Path) -> None:
    run = _gemm_run(1.038, 1650, (0.5, 0.4))  # band [0, 1]: the work changed by +3.8%..+21%
    verdict = _judge(tmp_path, [run], _gemm_baseline(1410, (0.4, 0.3)))[0]
    assert verdict.status == "inconclusive" and verdict.doubt == "clock" and "straddles" in verdict.message


def test_a_fit_that_says_nothing_is_not_kept() -> None:
    # Host-timed eager samples (a distributed step) can spread tens of percent while the clock barely moves: such a
    # fit's error is larger than the band [0, 1] itself, so the record keeps no exponent (nor an out-of-range one).
    from pytest_gpuperf.timing.sampling import TimingResult

    clocks = [1500.0 + (12.0 if i % 2 else -12.0) for i in range(30)]
    result = TimingResult(samples=[0.01 * (1.0 + 0.4 * ((i * 7) % 3 - 1)) for i in range(30)])
    result.sample_clocks = clocks
    assert result.clock_exponent is not None and result.clock_exponent[1] > 1.0
    assert "clock_exponent" not in result.summary()


def test_at_a_tight_tolerance_a_small_clock_change_is_judged_across_the_band(tmp_path: Path) -> None:
    # +3.5% of the work read as time +2.3% at an SM clock 2% above the baseline's (the H200 GEMM at its power cap):
    # at a 2% tolerance the band puts the work at +3.2%..+3.7%; at the default 5% a 2% clock change is no change.
    def run() -> Metric:
        metric = _gemm_run(1.0229, 1545, (0.6, 0.04))
        metric.tolerance = 0.02
        return metric

    tight = run()
    verdict = _judge(tmp_path, [tight], _gemm_baseline(1515, (0.53, 0.04)), time_tolerance=0.02)[0]
    assert tight.extra["judged_on"] == "time+clock exponent" and tight.extra["work_change"][0] > 1.03
    assert verdict.status == "regression", verdict.message
    default = run()
    default.tolerance = 0.05
    verdict = _judge(tmp_path, [default], _gemm_baseline(1515, (0.53, 0.04)))[0]
    assert "judged_on" not in default.extra and verdict.status == "unchanged", verdict.message


def test_at_the_power_cap_a_clock_within_three_percent_is_the_caps_wander_and_time_decides(tmp_path: Path) -> None:
    # Both sides at the power cap, the run's clock 2.6% above the baseline's, a 2% gate: the time (+0.4%) decides,
    # not a band that would read the same work as up to +2.6% (the H200 GEMM's unchanged runs, issue 38).
    run = _gemm_run(1.004, 1555, (0.6, 0.12))
    run.extra["power_capped"] = True
    base = _gemm_baseline(1515, (0.6, 0.12))
    base["step.time"]["power_capped"] = True
    verdict = _judge(tmp_path, [run], base, time_tolerance=0.02)[0]
    assert verdict.status == "unchanged", verdict.message
    assert "judged_on" not in run.extra


def test_uncapped_or_past_three_percent_the_band_still_reads_the_clock_at_a_tight_gate(tmp_path: Path) -> None:
    run = _gemm_run(1.004, 1555, (0.6, 0.12))  # the same readings, the baseline not at the cap: the band engages
    verdict = _judge(tmp_path, [run], _gemm_baseline(1515, (0.6, 0.12)), time_tolerance=0.02)[0]
    assert run.extra["judged_on"] == "time+clock exponent", verdict.message
    far = _gemm_run(1.004, 1650, (0.6, 0.12))  # both capped, but the clock 8.9% off: a hotter or cooler chip
    far.extra["power_capped"] = True
    base = _gemm_baseline(1515, (0.6, 0.12))
    base["step.time"]["power_capped"] = True
    verdict = _judge(tmp_path, [far], base, time_tolerance=0.02)[0]
    assert far.extra["judged_on"] == "time+clock exponent" and verdict.status != "unchanged", verdict.message


def test_a_tight_gate_records_its_baseline_from_three_processes() -> None:
    from pytest_gpuperf.judging.replication import default_processes

    assert default_processes(host_cpu=False) == 1
    assert default_processes(host_cpu=False, tight=True) == 3
    assert default_processes(host_cpu=False, power_capped=True) == 3
