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


def settled(share: float, config: MeasureConfig) -> tuple[str, str]:
    """(the method the samples are timed by, the note) after a warm-up that read ``share``."""
    warm = WarmupResult(calls=10, seconds=0.3, per_call=0.0207, cpu_share=share)
    sampler, _, note = ThreadClockSampler(_wall_clock).settle(warm, config)
    return sampler.method, note


def test_the_threshold_is_well_above_half_and_below_pure_compute() -> None:
    assert BLOCKING_SHARE == 0.9  # pure compute reads 0.99-1.0 net of run-queue wait on the busy 2-core VM


def test_a_step_waiting_a_third_of_its_time_is_timed_by_the_wall_clock() -> None:
    # 20.7 ms of compute beside a 10 ms sleep: a share of 0.67, which the former 0.5 threshold let pass as compute
    method, note = settled(20.7 / 30.7, MeasureConfig())
    assert method == "wall" and "computed for 67.4% of the warm-up's wall time, under 90%" in note


def test_pure_compute_keeps_the_thread_clock() -> None:
    assert settled(0.995, MeasureConfig()) == ("thread_cpu", "")
    pinned = timed_like(THREAD_ENTRY, MeasureConfig())
    assert settled(0.995, pinned) == ("thread_cpu", "")


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
