"""Waiting on the CPU backend: a step whose thread computes for under 90% of its wall time (sleep, I/O, a lock) is
timed by the wall clock, also against a baseline timed by the thread clock, so added waiting shows as a slowdown.
The CPU share is injected; no assertion compares two real timings."""

from __future__ import annotations

from pytest_gpuperf.measuring.plan import timed_like
from pytest_gpuperf.timing.samplers import ThreadClockSampler
from pytest_gpuperf.timing.sampling import BLOCKING_SHARE, MeasureConfig
from pytest_gpuperf.timing.warmup import WarmupResult

THREAD_ENTRY = {"value": 0.0207, "method": "thread_cpu"}


def _wall_clock(step: object, iters: int) -> float:
    return 0.0


def settled(share: float, config: MeasureConfig, switches: int | None = 10) -> tuple[str, str]:
    """(the method the samples are timed by, the note) after a 10-call warm-up that read ``share`` and in which the
    thread gave up its CPU ``switches`` times."""
    warm = WarmupResult(calls=10, seconds=0.3, per_call=0.0207, cpu_share=share, voluntary_switches=switches)
    sampler, _, note = ThreadClockSampler(_wall_clock).settle(warm, config)
    return sampler.method, note


def test_the_threshold_is_well_above_half_and_below_pure_compute() -> None:
    assert BLOCKING_SHARE == 0.9  # pure compute reads 0.99-1.0 net of run-queue wait on the busy 2-core VM


def test_a_step_waiting_a_third_of_its_time_is_timed_by_the_wall_clock() -> None:
    # 20.7 ms of compute beside a 10 ms sleep: a share of 0.67, which the former 0.5 threshold let pass as compute
    method, note = settled(20.7 / 30.7, MeasureConfig())
    assert method == "wall" and "computed for 67.4% of the warm-up's wall time, under 90%" in note


def test_pure_compute_keeps_the_thread_clock() -> None:
    assert settled(0.995, MeasureConfig(), switches=0) == ("thread_cpu", "")
    pinned = timed_like(THREAD_ENTRY, MeasureConfig())
    assert settled(0.995, pinned, switches=0) == ("thread_cpu", "")


def test_compute_slowed_by_a_busy_host_is_not_waiting() -> None:
    # a throttled or stolen CPU can read a share of 0.7 for pure compute: its thread never gave up the CPU itself
    pinned = timed_like(THREAD_ENTRY, MeasureConfig())
    assert settled(0.7, pinned, switches=0) == ("thread_cpu", "")
    assert settled(0.7, MeasureConfig(), switches=1) == ("thread_cpu", "")  # under a tenth of the calls, at least 2
    assert settled(0.7, MeasureConfig(), switches=None) == ("thread_cpu", "")  # not tracked: the band is not judged
    assert settled(0.3, MeasureConfig(), switches=0)[0] == "wall"  # under half: blocking whatever the switches


def test_the_warm_up_counts_the_threads_voluntary_switches() -> None:
    import time

    from pytest_gpuperf.timing.warmup import warm_up

    def sleep() -> float:
        time.sleep(0.001)  # gives up the CPU once per call (no duration is asserted)
        return 0.001

    result = warm_up(sleep, min_time=0.0, min_calls=5, budget=0.0, cpu_now=time.thread_time, fixed_calls=5)
    assert result.voluntary_switches is not None and result.voluntary_switches >= 5


def test_a_baseline_timed_by_the_thread_clock_does_not_hide_waiting_added_since() -> None:
    pinned = timed_like(THREAD_ENTRY, MeasureConfig())
    assert pinned.cpu_clock == "thread" and pinned.wall_when_waiting
    method, note = settled(0.67, pinned)
    assert method == "wall" and "its baseline was timed by the thread clock" in note


def test_an_explicit_thread_clock_is_kept_and_says_what_it_misses() -> None:
    chosen = timed_like(THREAD_ENTRY, MeasureConfig(cpu_clock="thread"))
    assert not chosen.wall_when_waiting
    method, note = settled(0.67, chosen)
    assert method == "thread_cpu" and "waiting is not in these numbers" in note


def test_a_wall_baseline_stays_on_the_wall_clock() -> None:
    config = timed_like({"value": 0.03, "method": "wall"}, MeasureConfig())
    assert config.cpu_clock == "wall" and not config.wall_when_waiting


def test_a_step_that_sleeps_beside_its_compute_leaves_a_thread_clock_baseline_for_the_wall_clock() -> None:
    import time

    from pytest_gpuperf.backends.cpu import CpuBackend
    from pytest_gpuperf.timing import measure_time

    def step() -> None:
        end = time.perf_counter() + 0.002  # 2 ms of compute, then 1 ms of waiting: a share near 0.67
        while time.perf_counter() < end:
            pass
        time.sleep(0.001)

    result = measure_time(CpuBackend(), step, timed_like(THREAD_ENTRY, MeasureConfig(max_time=0.5)))
    assert result.method == "wall" and "its baseline was timed by the thread clock" in result.method_note
