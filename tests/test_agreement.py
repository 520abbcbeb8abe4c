"""Two processes that agree decide (issue 38): injected readings, never real timings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.context import build_context
from pytest_gpuperf.judging.agreement import IN_PROCESS, reading
from pytest_gpuperf.judging.gate import suspects
from pytest_gpuperf.judging.replication import reconcile
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.results import KIND_TIME, Metric, Verdict
from tests.test_judging import NODE, FakeBackend, settings
from tests.test_verdicts import entry, samples, time_metric

#: The H200 GEMM's recording (issue 38): 3 processes whose judged times spread 1.1%.
CALM = {"process_spread": 0.011, "processes": 3}
FRESH = "a fresh process"


def timed(ratio: float, ci: tuple[float, float], status: str = "regression", **extra: Any) -> Verdict:
    """A time verdict that read ``ratio`` (95% CI ``ci``) at the default 5% tolerance."""
    metric = Metric("step.time", 1.0, "s", "lower", KIND_TIME, extra=dict(extra))
    doubt = "clock" if status == "inconclusive" and "work_change" in extra else ""
    reason = "the SM clock moved and that range straddles the tolerance; lock the GPU's clocks" if doubt else ""
    message = f"time {ratio - 1:+.1%}" + (f": inconclusive, {reason}" if reason else "")
    suspected = "regression" if status == "inconclusive" else ""
    return Verdict(metric, status, 1.0, ratio, ci, 0.05, message, suspected=suspected, doubt=doubt, reason=reason)


def banded(low: float, high: float, status: str, time_ratio: float | None = None) -> Verdict:
    """A time verdict decided over the clock band: the work changed by ``low``..``high`` (each end's CI 0.3% wider)."""
    return timed(
        time_ratio or high,
        (high - 0.003, high + 0.003),
        status,
        judged_on="time+clock exponent",
        work_change=[low, high],
        work_interval=[low - 0.003, high + 0.003],
    )


def test_the_issues_gemm_first_past_and_a_confirmation_over_a_straddling_band_fail_together() -> None:
    # First +8.8% (95% CI +7.4..+9.3%); its confirmation read +8.5% with a clock band that straddled 5%.
    first = timed(1.088, (1.074, 1.093))
    again = banded(1.039, 1.085, "inconclusive")
    verdict = reconcile(first, again, where=FRESH, entry=CALM)
    assert verdict.status == "regression" and verdict.failed
    assert "the two processes agree past the 5% tolerance" in verdict.message
    assert "raise time_tolerance" not in verdict.message


def test_a_clock_band_past_the_tolerance_and_a_straddling_confirmation_fail_together() -> None:
    # The issue's second case: the band put the work at +5.8..+7.4%, the confirmation read +7.1% over a straddle.
    first = banded(1.058, 1.074, "regression")
    again = banded(1.049, 1.071, "inconclusive", time_ratio=1.071)
    verdict = reconcile(first, again, where=FRESH, entry=CALM)
    assert verdict.status == "regression" and "together +5.5%..+7.4%" in verdict.message


def test_a_first_straddle_is_confirmed_in_a_fresh_process_and_decides_with_an_agreeing_one() -> None:
    first = banded(1.035, 1.075, "inconclusive")
    assert suspects([first]) == [first]  # a fresh process is asked for
    verdict = reconcile(first, timed(1.07, (1.065, 1.075)), where=FRESH, entry=CALM)
    assert verdict.status == "regression" and verdict.doubt == "" and ": inconclusive" not in verdict.message


def test_measurements_that_disagree_stay_inconclusive() -> None:
    first = timed(1.088, (1.074, 1.093))
    verdict = reconcile(first, timed(1.01, (1.0, 1.02), "unchanged"), where=FRESH, entry=CALM)
    assert verdict.status == "inconclusive" and verdict.doubt == "confirmation"
    straddle = banded(1.02, 1.07, "inconclusive")  # the first's band: its middle is within the tolerance
    verdict = reconcile(straddle, timed(1.09, (1.08, 1.10)), where=FRESH, entry=CALM)
    assert verdict.status == "inconclusive" and "a fresh process read +9.0%" in verdict.message
    verdict = reconcile(straddle, timed(1.0, (0.99, 1.01), "unchanged"), where=FRESH, entry=CALM)
    assert verdict.status == "inconclusive"  # never passed: the first reading may be a real slowdown


def test_two_readings_past_the_tolerance_that_together_straddle_it_stay_inconclusive_without_raising_it() -> None:
    first = banded(1.030, 1.080, "inconclusive")
    verdict = reconcile(first, banded(1.035, 1.075, "inconclusive"), where=FRESH, entry=CALM)
    assert verdict.status == "inconclusive" and "which straddles the tolerance" in verdict.message
    assert "raise time_tolerance" not in verdict.message and "--gpuperf-ab" in verdict.message
    straddling_confirmation = reconcile(timed(1.06, (1.055, 1.065)), banded(1.01, 1.07, "inconclusive"), where=FRESH)
    assert straddling_confirmation.status == "inconclusive"
    assert "raise time_tolerance" not in straddling_confirmation.message


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        ({"process_spread": 0.03, "processes": 3}, "more than 50% of the tolerance"),
        ({"process_spread": 0.0, "processes": 1}, "recorded from 1 process(es)"),
        ({}, "recorded from 1 process(es)"),
    ],
)
def test_agreement_decides_only_where_the_recorded_spread_is_far_below_the_tolerance(
    facts: dict[str, Any], words: str
) -> None:
    first = timed(1.088, (1.074, 1.093))
    verdict = reconcile(first, banded(1.039, 1.085, "inconclusive"), where=FRESH, entry=facts, node_id=NODE)
    assert verdict.status == "inconclusive" and words in verdict.message
    assert "raise time_tolerance" not in verdict.message and "gpuperf_processes=5" in verdict.message


def test_processes_further_apart_than_the_recorded_spread_do_not_agree() -> None:
    verdict = reconcile(timed(1.20, (1.19, 1.21)), banded(1.04, 1.10, "inconclusive"), where=FRESH, entry=CALM)
    assert verdict.status == "inconclusive" and "further apart than the baseline's processes spread" in verdict.message


def test_a_second_measurement_in_the_same_process_or_a_first_in_another_host_state_never_agrees() -> None:
    first = timed(1.088, (1.074, 1.093))
    again = banded(1.039, 1.085, "inconclusive")
    assert reconcile(first, again, where=IN_PROCESS, entry=CALM).status == "inconclusive"
    state = timed(1.088, (1.074, 1.093), "inconclusive")
    state.doubt, state.suspected = "state", "regression"  # a host speed state: its reading is not the change
    assert reconcile(state, again, where=FRESH, entry=CALM).status == "inconclusive"
    contended = banded(1.039, 1.085, "inconclusive")
    contended.metric.extra["contended"] = True  # a doubtful confirmation vouches for nothing
    assert reconcile(first, contended, where=FRESH, entry=CALM).status == "inconclusive"


def test_a_throughput_reads_its_change_in_its_own_direction() -> None:
    metric = Metric("step.throughput", 1.0, "rows/s", "higher", "throughput")
    verdict = Verdict(metric, "regression", 1.0, 0.90, (0.89, 0.91), 0.05, "throughput -10.0%")
    found = reading(verdict)
    assert found is not None and found.point == pytest.approx(1 / 0.90) and found.low == pytest.approx(1 / 0.91)
    assert found.words == "-10.0% (95% CI -11.0%..-9.0%)"


def test_through_the_gate_the_issues_case_fails_and_unchanged_code_never_does(tmp_path: Path) -> None:
    """Real clock-band arithmetic: the confirmation ran 4% below the baseline's clock with a loose exponent fit."""
    base = entry(samples(2.0e-4, 1), sm_clock_mhz=1410, clock_exponent=0.4, clock_exponent_se=0.3, **CALM)
    judging = Judging(settings(tmp_path), FixedBaselines({"step.time": base}))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]

    def run(ratio: float, clock: float, seed: int) -> Metric:
        times = [t * ratio for t in samples(2.0e-4, seed)]
        return time_metric(times, sm_clock_mhz=clock, clock_exponent=0.5, clock_exponent_se=0.4)

    [first] = judging.judge(context, [run(1.088, 1410, 7)])
    assert first.status == "regression"
    [verdict] = judging.confirm(context, [first], {"step.time": run(1.085, 1350, 8)})
    assert verdict.status == "regression" and "agree past the 5% tolerance" in verdict.message
    [same] = judging.judge(context, [run(1.0, 1410, 9)])
    assert same.status == "unchanged" and not suspects([same])
    # Unchanged work read 4.3% below the baseline's clock, its time following the clock fully (+4.5%): the band
    # reaches from no change to +4.5%, whichever process reads it.
    for seed in (10, 11):
        [slow_clock] = judging.judge(context, [run(1.045, 1350, seed)])
        assert slow_clock.status != "regression"
        [after] = judging.confirm(context, [slow_clock], {"step.time": run(1.045, 1350, seed + 10)})
        assert after.status != "regression", after.message
