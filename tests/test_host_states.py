"""Issue 35: unchanged host-CPU code whose whole process landed in a slow state is never failed.

A short step's band of process states, and a suspected host-CPU regression confirmed in 2 fresh processes, each of
which must agree. Samples are injected: no real timing is compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_gpuperf.judging.evidence import SHORT_STEP_STATES
from pytest_gpuperf.judging.replication import HOST_CONFIRMATIONS
from pytest_gpuperf.results import Metric
from tests.test_judging import NODE
from tests.test_verdicts import entry, judge_one, samples, time_metric

#: One calibration call of the host (seconds), stored with the entry and measured by the run.
CALIBRATION = 50e-6


def host_metric(center: float, seed: int) -> Metric:
    """A host-CPU time metric (it carries this process's calibration) around ``center`` seconds."""
    return time_metric(samples(center, seed), calibration=CALIBRATION, calibration_spread=0.02, method="thread_cpu")


def host_entry(center: float, **facts: Any) -> dict[str, Any]:
    """A host-CPU entry recorded from 3 processes that agreed closely (3.7%, as in the issue)."""
    return entry(
        samples(center, 99),
        calibration=CALIBRATION,
        calibration_spread=0.02,
        process_spread=0.037,
        processes=3,
        method="thread_cpu",
        **facts,
    )


def test_a_short_host_step_in_its_slow_process_state_is_inconclusive_and_past_the_band_fails(tmp_path: Path) -> None:
    base = host_entry(4.15e-6)  # a 4 us step: under a quarter of a calibration call
    slow = judge_one(tmp_path, host_metric(6.4e-6, 1), base, time_tolerance=0.25)[0]  # +54%, the slow state
    assert slow.status == "inconclusive" and slow.doubt == "spread" and slow.suspected == "regression"
    assert f"varies up to {SHORT_STEP_STATES:.0%} between fresh processes" in slow.message
    doubled = judge_one(tmp_path, host_metric(8.3e-6, 2), base, time_tolerance=0.25)[0]  # 2x: past band + tolerance
    assert doubled.status == "regression"
    same = judge_one(tmp_path, host_metric(4.15e-6, 3), base, time_tolerance=0.25)[0]
    assert same.status == "inconclusive" and same.suspected == "unchanged"  # within the band: no evidence either way


def test_a_longer_host_step_or_a_gpu_step_keeps_its_recorded_spread(tmp_path: Path) -> None:
    longer = judge_one(tmp_path, host_metric(150e-6, 4), host_entry(95e-6), time_tolerance=0.25)[0]
    assert longer.status == "regression"  # 95 us: two calibration calls, judged on its recorded spread
    gpu_base = entry(samples(4.15e-6, 5), process_spread=0.037, processes=1)
    gpu = judge_one(tmp_path, time_metric(samples(6.4e-6, 6)), gpu_base, time_tolerance=0.25)[0]
    assert gpu.status == "regression"  # no host calibration: not a host-CPU step


def fresh_runs(centers: list[float], asked: list[int]) -> Any:
    """A fake ``fresh(n)``: the given processes' step times, noting how many were asked for."""

    def fresh(n: int) -> tuple[list[dict[str, Metric]], str]:
        asked.append(n)
        return [{"step.time": host_metric(c, 10 + i)} for i, c in enumerate(centers[:n])], ""

    return fresh


def test_a_host_cpu_suspect_is_confirmed_by_two_fresh_processes_that_must_both_agree(tmp_path: Path) -> None:
    base = host_entry(95e-6)
    for centers, status in (
        ([150e-6, 150e-6], "regression"),
        ([150e-6, 96e-6], "inconclusive"),
        ([96e-6, 150e-6], "inconclusive"),
    ):
        first, judging = judge_one(tmp_path, host_metric(150e-6, 7), base, time_tolerance=0.25)
        assert first.status == "regression"
        asked: list[int] = []
        judging.second_look(NODE, fresh_runs(centers, asked))
        [verdict] = judging.verdicts[NODE]
        assert asked == [HOST_CONFIRMATIONS] and verdict.status == status, (centers, verdict.message)
        assert bool(judging.failure_lines(NODE)) == (status == "regression")


def test_a_gpu_suspect_is_confirmed_by_one_fresh_process(tmp_path: Path) -> None:
    _, judging = judge_one(tmp_path, time_metric(samples(1.5, 8)), entry(samples(1.0, 9)))
    asked: list[int] = []

    def fresh(n: int) -> tuple[list[dict[str, Metric]], str]:
        asked.append(n)
        return [{"step.time": time_metric(samples(1.5, 20 + i))} for i in range(n)], ""

    judging.second_look(NODE, fresh)
    assert asked == [1] and judging.verdicts[NODE][0].status == "regression"
