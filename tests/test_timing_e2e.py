"""End-to-end timing behaviour a user sees: one measuring CPU thread (``gpuperf_cpu_threads``), recorded in
the fingerprint, the test's own thread count restored; a blocking step timed by the wall clock."""

from __future__ import annotations

import json

import pytest
import yaml

THREADS_TEST = """
import collections, json, torch

def test_threads(gpuperf):
    torch.set_num_threads(2)
    seen = collections.Counter()

    def step():
        seen[torch.get_num_threads()] += 1

    gpuperf.measure(step, memory=False)
    assert torch.get_num_threads() == 2  # the test's own setting is restored after measuring
    with open("seen.json", "w") as handle:
        json.dump({str(k): v for k, v in seen.items()}, handle)
"""

SLEEP_TEST = """
import time

def test_sleeps(gpuperf):
    gpuperf.measure(lambda: time.sleep(0.02), memory=False)
"""


def _fingerprint_and_entry(pytester: pytest.Pytester, test_id: str) -> tuple[dict, dict]:
    [path] = sorted((pytester.path / "baselines").glob("cpu-*.yaml"))
    data = yaml.safe_load(path.read_text())
    return data["fingerprint"], data["tests"][test_id]


@pytest.mark.parametrize(("flags", "threads"), [((), 1), (("-o", "gpuperf_cpu_threads=2"), 2)])
def test_cpu_steps_are_measured_with_the_configured_threads_recorded_in_the_fingerprint(
    pytester: pytest.Pytester, fast_args: list[str], flags: tuple[str, ...], threads: int
) -> None:
    pytester.makepyfile(test_perf=THREADS_TEST)
    result = pytester.runpytest("--gpuperf-update", *fast_args, *flags)
    result.assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "seen.json").read_text())
    # the timing loop's calls: all but the few of the analytic pass and the plan, outside the loop
    assert seen.get(str(threads), 0) >= 100 and sum(seen.values()) - seen[str(threads)] <= 10
    fingerprint, _ = _fingerprint_and_entry(pytester, "test_perf.py::test_threads[cpu]")
    assert fingerprint["threads"] == threads


def test_a_negative_thread_count_is_a_usage_error(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_perf=THREADS_TEST)
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_cpu_threads=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpuperf_cpu_threads*"])


def test_a_sleeping_step_is_recorded_by_the_wall_clock(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_perf=SLEEP_TEST)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    _, entry = _fingerprint_and_entry(pytester, "test_perf.py::test_sleeps[cpu]")
    assert entry["step.time"]["method"] == "wall"
    assert entry["step.time"]["value"] >= 0.02  # sleep never returns early; the thread clock read ~80 us


def test_timing_options_reach_the_measuring_config(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.backends import cpu_threads
    from pytest_gpuperf.settings import resolve_settings

    before = cpu_threads.configured()
    try:
        default = resolve_settings(pytester.parseconfig()).measure
        assert default.cupti is True and default.cpu_threads == 1 and default.shift_layout is True
        chosen = resolve_settings(
            pytester.parseconfig(
                "-o", "gpuperf_no_cupti=true", "-o", "gpuperf_cpu_threads=3", "-o", "gpuperf_no_heap_shift=true"
            )
        ).measure
        assert chosen.cupti is False and chosen.cpu_threads == 3 and cpu_threads.configured() == 3
        assert chosen.shift_layout is False
    finally:
        cpu_threads.configure(before)
