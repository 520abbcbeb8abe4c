"""The timing loop's parts with injected clocks and readings: warm-up until steady, contention retakes,
/proc parsers, budgets, blocking steps. No assertion compares two real timings."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.backends import cpu_threads
from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.backends.fingerprint import software_differences
from pytest_gpuperf.timing import MeasureConfig, TimingResult, measure_time
from pytest_gpuperf.timing.contention import (
    ContentionGuard,
    parse_cpu_pressure,
    parse_schedstat,
    process_wait_reader,
    read_cpu_pressure,
    thread_wait_reader,
)
from pytest_gpuperf.timing.sampling import sample_floor, sample_loop
from pytest_gpuperf.timing.warmup import iters_for, steady, warm_up

DATA = Path(__file__).parent / "data" / "proc"


class FakeClock:
    """A clock that only moves when a fake step says how long it took."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def step_taking(self, durations):
        """A ``time_call`` for :func:`warm_up`: advances the clock by the next duration and returns it."""
        it = iter(durations)

        def call() -> float:
            seconds = next(it)
            self.t += seconds
            return seconds

        return call


def test_schedstat_and_pressure_parsers_read_the_fixture_files():
    assert parse_schedstat((DATA / "schedstat").read_text()) == 5147332
    assert parse_cpu_pressure((DATA / "pressure_cpu").read_text()) == pytest.approx(55.2)
    assert parse_cpu_pressure((DATA / "pressure_cpu_idle_no_full").read_text()) == 0.0
    assert read_cpu_pressure(DATA / "pressure_cpu") == pytest.approx(55.2)
    assert read_cpu_pressure(DATA / "absent") is None
    with pytest.raises(ValueError, match="schedstat"):
        parse_schedstat("garbage")
    with pytest.raises(ValueError, match="avg10"):
        parse_cpu_pressure("full avg10=1.0\n")


def test_thread_wait_reader_reads_a_tasks_schedstat_and_degrades_to_none(tmp_path):
    task = tmp_path / "self" / "task" / "42"
    task.mkdir(parents=True)
    (task / "schedstat").write_text("10 2500 3\n")
    assert thread_wait_reader(42, proc=tmp_path)() == 2500
    assert thread_wait_reader(43, proc=tmp_path)() is None


def test_process_wait_reader_sums_every_threads_wait_and_skips_a_thread_that_ended(tmp_path):
    # A CPU Vulkan adapter's rasterizer threads do the step while the calling thread sleeps on a fence: their
    # waits for a CPU are what slows a sample, so the reader sums the process's threads.
    for tid, wait in (("7", 1000), ("8", 2500), ("9", 500)):
        (tmp_path / "self" / "task" / tid).mkdir(parents=True)
        (tmp_path / "self" / "task" / tid / "schedstat").write_text(f"10 {wait} 3\n")
    (tmp_path / "self" / "task" / "10").mkdir()  # a thread that ended: no schedstat left
    assert process_wait_reader(proc=tmp_path)() == 4000
    assert process_wait_reader(proc=tmp_path / "absent")() is None


def test_the_measuring_loop_reads_the_process_wait_when_the_backend_works_on_other_threads():
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.timing.loop import new_guard

    assert Backend.wait_scope(CpuBackend()) == "thread"
    thread_guard = new_guard(MeasureConfig())
    process_guard = new_guard(MeasureConfig(wait_scope="process"))
    assert thread_guard.read_wait.__qualname__.startswith("thread_wait_reader")
    assert process_guard.read_wait.__qualname__.startswith("process_wait_reader")
    assert process_guard.read_wait() is not None  # this process's own threads, on Linux


def test_contended_samples_are_retaken_and_summarised():
    guard = ContentionGuard(
        read_wait=iter([0, 0, 500_000, 500_000, 500_000, 500_000, 510_000]).__next__,
        read_pressure=lambda: 12.5,
        clock_ns=iter(range(0, 10**9, 1_000_000)).__next__,
        limit=0.1,
    )
    values = iter([9.0, 1.0, 1.1])
    # sample 1: waited 0.5 ms of 1 ms -> retaken; sample 2: waited 0 -> kept
    assert guard.take(lambda: next(values)) == 1.0
    # sample 3: waited 0.01 ms of 1 ms -> kept
    assert guard.take(lambda: next(values)) == 1.1
    summary = guard.summary()
    assert summary["retaken"] == 1 and summary["contended_samples"] == 0 and summary["contended"] is False
    assert summary["cpu_pressure_avg10"] == 12.5 and summary["available"] is True
    assert summary["max_wait_share"] == pytest.approx(0.01)


def test_retakes_are_bounded_and_a_run_that_stays_contended_is_flagged():
    waits = itertools.count(0, 800_000)  # every sample: 0.8 ms waited of 1 ms
    guard = ContentionGuard(
        read_wait=lambda: next(waits),
        read_pressure=lambda: None,
        clock_ns=iter(range(0, 10**12, 1_000_000)).__next__,
        max_retakes=3,
    )
    values = [guard.take(lambda: 1.0) for _ in range(5)]
    summary = guard.summary()
    assert values == [1.0] * 5
    assert summary["retaken"] == 3 and summary["contended_samples"] == 5
    assert summary["contended"] is True and summary["cpu_pressure_avg10"] is None


def test_the_budget_can_refuse_a_retake():
    waits = itertools.count(0, 800_000)
    guard = ContentionGuard(
        read_wait=lambda: next(waits), read_pressure=lambda: None, clock_ns=iter(range(0, 10**12, 10**6)).__next__
    )
    guard.take(lambda: 1.0, may_retake=lambda: False)
    assert guard.retaken == 0 and guard.summary()["contended_samples"] == 1


def test_without_schedstat_the_guard_passes_samples_through():
    guard = ContentionGuard(read_wait=lambda: None, read_pressure=lambda: None)
    assert guard.take(lambda: 2.0) == 2.0
    assert guard.summary()["available"] is False and guard.summary()["contended"] is False


def test_warm_up_continues_past_a_flat_slow_phase_until_the_step_is_steady():
    # The known case: x * 2 on 64K floats, ~100 calls of 8 ms (page faults), then 4.5 us per call.
    clock = FakeClock()
    calls = itertools.chain([8e-3] * 100, itertools.repeat(4.5e-6))
    result = warm_up(clock.step_taking(calls), min_time=0.05, min_calls=200, budget=1.0, now=clock)
    assert result.settled and result.calls >= 200
    assert result.per_call == pytest.approx(4.5e-6)
    assert result.seconds == pytest.approx(0.8 + (result.calls - 100) * 4.5e-6)


def test_warm_up_stops_early_on_a_steady_step_and_flags_one_that_keeps_trending():
    clock = FakeClock()
    steady_step = warm_up(clock.step_taking(itertools.repeat(1e-3)), min_time=0.0, min_calls=10, budget=1.0, now=clock)
    assert steady_step.settled and steady_step.calls == 10 and steady_step.note == ""
    clock = FakeClock()
    shrinking = (1e-3 * 0.97**k for k in itertools.count())  # 3% faster every call: never steady
    trending = warm_up(clock.step_taking(shrinking), min_time=0.0, min_calls=10, budget=0.02, now=clock)
    assert not trending.settled and "still changing" in trending.note
    assert clock.t >= 0.02 and trending.calls < 40


def test_a_step_longer_than_the_warm_up_budget_is_called_once():
    clock = FakeClock()
    result = warm_up(clock.step_taking(itertools.repeat(30.0)), min_time=0.05, min_calls=200, budget=1.0, now=clock)
    assert result.calls == 1 and result.settled and "too few" in result.note


def test_a_fixed_warm_up_makes_exactly_that_many_calls():
    clock = FakeClock()
    result = warm_up(
        clock.step_taking(itertools.repeat(1.0)), min_time=0.0, min_calls=200, budget=0.0, now=clock, fixed_calls=4
    )
    assert result.calls == 4 and result.settled


def test_steadiness_compares_window_medians():
    assert steady([1.0]) is None
    assert steady([2.0, 1.0]) is False
    assert steady([1.0] * 20) is True
    assert steady([2.0] * 15 + [1.0] * 5) is False
    assert steady([2.0] * 10 + [1.0] * 10) is True  # the latest two windows are flat
    assert steady([1.0, 5.0, 1.0, 1.0] * 10) is True  # outliers do not move a median


def test_warm_up_reports_the_cpu_share_net_of_run_queue_wait():
    clock = FakeClock()
    cpu = iter([0.0, 0.2])
    waits = iter([0, 500_000_000])  # 0.5 s of the 1 s spent waiting for a CPU
    result = warm_up(
        clock.step_taking([0.5, 0.5]),
        min_time=0.0,
        min_calls=2,
        budget=1.0,
        now=clock,
        cpu_now=lambda: next(cpu),
        wait_ns=lambda: next(waits),
    )
    assert result.cpu_share == pytest.approx(0.4)  # 0.2 s computed of the 0.5 s not waiting


def test_iterations_come_from_the_clock_or_the_wall_when_the_clock_read_nothing():
    assert iters_for(1e-3, 1e-3, 2e-3) == 3
    assert iters_for(0.0, 1.0, 2e-3) == 1  # a thread clock reading ~0 (a sleeping step): no 10x escalation
    assert iters_for(4.5e-6, 8e-3, 2e-3) == 534
    assert iters_for(0.0, 0.0, 2e-3) == 1 << 20


def test_the_sample_floor_stays_within_the_budget_for_slow_steps():
    config = MeasureConfig(max_time=2.0, min_samples=30)
    assert sample_floor(config, 0.1) == 3
    assert sample_floor(config, 30.0) == 1
    assert sample_floor(MeasureConfig(max_time=float("inf")), 30.0) == 3


def test_sampling_stops_at_the_budget_after_the_floor():
    clock = FakeClock()
    take = clock.step_taking(itertools.repeat(0.4))
    result = TimingResult(samples=[])
    sample_loop(take, result, MeasureConfig(min_samples=30), None, deadline=0.5, floor=3, now=clock)
    assert len(result.samples) == 3 and result.stop == "budget" and result.budget_exhausted


@pytest.fixture(scope="module")
def cpu() -> CpuBackend:
    """The CPU backend."""
    return CpuBackend()


def test_a_slow_step_stays_within_its_budget(cpu):
    # Before: a 30 s step took 331 s under --gpuperf-max-time 2. A 0.3 s step with max_time 1 costs a few calls.
    calls = []

    def slow_step() -> None:
        calls.append(1)
        end = time.perf_counter() + 0.3  # 0.3 s of wall time however loaded the machine is
        while time.perf_counter() < end:
            pass

    started = time.perf_counter()
    result = measure_time(cpu, slow_step, MeasureConfig(max_time=1.0))
    assert time.perf_counter() - started < 10.0
    assert len(calls) <= 7 and len(result.samples) >= 1 and result.iters_per_sample == 1
    assert result.stop == "budget" and result.warmup_calls <= 4


def test_a_sleeping_step_is_timed_by_the_wall_clock(cpu):
    # Before: the one-thread CPU clock recorded a step sleeping 1 s as 76.7 us.
    started = time.perf_counter()
    result = measure_time(cpu, lambda: time.sleep(0.05), MeasureConfig(max_time=0.5))
    assert time.perf_counter() - started < 10.0
    assert result.method == "wall" and "blocks" in result.method_note
    assert result.typical >= 0.05  # sleep never returns early
    assert result.iters_per_sample == 1  # no 10x escalation on a clock that read ~0


def test_an_explicit_thread_clock_keeps_counting_cpu_time_and_says_what_it_misses(cpu):
    result = measure_time(cpu, lambda: time.sleep(0.02), MeasureConfig(max_time=0.3, cpu_clock="thread"))
    assert result.method == "thread_cpu" and "waiting is not in these numbers" in result.method_note


def test_measurements_carry_warm_up_and_contention_facts(cpu):
    a = torch.randn(64, 64)
    result = measure_time(cpu, lambda: a @ a, MeasureConfig(max_time=0.3, min_samples=5, target_precision=0.5))
    summary = result.summary()
    assert summary["warmup_calls"] == result.warmup_calls >= 1 and summary["settled"] in (True, False)
    assert result.contention is not None and "retaken" in result.contention
    assert set(summary) >= {"contended", "retaken_samples", "warmup_seconds", "cpu_threads"}


def test_cpu_thread_setting_is_validated_and_recorded_in_the_fingerprint(cpu):
    before = cpu_threads.configured()
    try:
        cpu_threads.configure(3)
        assert cpu.fingerprint()["threads"] == 3
        cpu_threads.configure(0)
        assert cpu.fingerprint()["threads"] == torch.get_num_threads()
        with pytest.raises(ValueError, match=">= 0"):
            cpu_threads.configure(-1)
        recorded = {**cpu.fingerprint(), "threads": 2}
        current = {**recorded, "threads": 1}
        assert software_differences(recorded, current) == ["threads 2 -> 1"]  # shown beside the verdicts
    finally:
        cpu_threads.configure(before)


def test_cpu_backend_calls_outside_the_loop_use_the_session_threads_but_never_override_the_loops(cpu):
    before, threads = cpu_threads.configured(), torch.get_num_threads()
    seen: list[int] = []

    def step() -> None:
        seen.append(torch.get_num_threads())

    try:
        torch.set_num_threads(2)
        cpu_threads.configure(1)
        cpu.time_block(step, 1)  # the plan's quick timing
        cpu.measure_peak_memory(step)
        with cpu_threads.measuring_threads(0):  # a loop told to keep the test's own count
            cpu.time_block(step, 1)
        assert seen == [1, 1, 2] and torch.get_num_threads() == 2
    finally:
        cpu_threads.configure(before)
        torch.set_num_threads(threads)


def test_one_stop_criterion_says_why_a_profiler_sessions_fixed_samples_stopped() -> None:
    from pytest_gpuperf.timing.stop_criterion import StopCriterion

    config = MeasureConfig(min_samples=30, max_samples=200, target_precision=1e-9)
    criterion = StopCriterion(config, None, deadline=10.0, floor=3, now=lambda: 0.0)
    few = TimingResult(samples=[1.0, 1.1, 1.2])
    assert not criterion.is_finished(few) and few.stop == ""  # below min_samples, before the deadline: go on
    assert criterion.is_finished(few, final=True) and few.stop == "budget" and few.budget_exhausted
    exact = TimingResult(samples=[1.0] * 30)
    assert criterion.is_finished(exact) and exact.stop == "precise" and not exact.budget_exhausted


def test_the_stop_criterion_never_stops_before_its_least_span_but_the_deadline_still_ends_it() -> None:
    from pytest_gpuperf.timing.stop_criterion import StopCriterion

    config = MeasureConfig(min_samples=3, max_samples=5, target_precision=1.0)
    t = [0.0]
    criterion = StopCriterion(config, None, deadline=10.0, floor=3, now=lambda: t[0], span_until=1.0)
    many = TimingResult(samples=[1.0] * 50)  # precise and past max_samples, but the span is not yet covered
    assert not criterion.is_finished(many) and many.stop == ""
    t[0] = 1.0
    assert criterion.is_finished(many) and many.stop == "precise"
    early_deadline = StopCriterion(config, None, deadline=0.5, floor=3, now=lambda: 0.6, span_until=1.0)
    cut = TimingResult(samples=[1.0] * 3)
    assert early_deadline.is_finished(cut) and cut.stop == "precise"  # the deadline bounds the span
