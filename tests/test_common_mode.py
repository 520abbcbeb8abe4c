"""The runner that moved (issue 39 item 4), with injected verdicts: the session's common mode, the verdicts judged
against it, the watch that holds reports until it is decided, and the session line."""

from __future__ import annotations

import math

import pytest

from pytest_gpuperf.judging.common_mode import RUNNER, candidate, estimate, point, possible, rejudge
from pytest_gpuperf.judging.runner_watch import RunnerWatch
from pytest_gpuperf.results import KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict

TOLERANCE = 0.10


def timing(ratio: float, tolerance: float = TOLERANCE, throughput: bool = False, status: str = "") -> Verdict:
    """A judged timing verdict with a slowdown of ``ratio`` (a throughput's ratio is the inverse)."""
    if throughput:
        metric = Metric("step.throughput", 100 / ratio, "items/s", "higher", KIND_THROUGHPUT)
        measured = 1 / ratio
    else:
        metric = Metric("step.time", ratio, "s", "lower", KIND_TIME)
        measured = ratio
    if not status:
        status = (
            "regression" if ratio > 1 + tolerance else "improvement" if ratio < 1 / (1 + tolerance) else "unchanged"
        )
    message = f"{metric.label()} x{ratio:.2f} > {tolerance:.0%}" if status == "regression" else ""
    return Verdict(metric, status, baseline=1.0, ratio=measured, tolerance=tolerance, message=message)  # type: ignore[arg-type]


def machine_doubted(ratio: float) -> Verdict:
    """A timing regression that the host calibration rule made inconclusive."""
    from pytest_gpuperf.judging.evidence import MACHINE, inconclusive

    return inconclusive(timing(ratio), "this machine's calibration ran 1.50x slower", MACHINE)


def session(ratios: list[float]) -> list:
    return [point(f"t{i}", "cpu", [timing(r)]) for i, r in enumerate(ratios)]


RUNNER_SLOWER = [1.50, 1.47, 1.53, 1.49, 1.52, 1.50, 1.46, 1.55, 1.51, 1.48]


def test_ten_tests_one_and_a_half_times_slower_are_one_runner_change_and_none_fails() -> None:
    mode = estimate(session(RUNNER_SLOWER))
    assert mode is not None and mode.ratio == pytest.approx(1.5, rel=0.02)
    assert len(mode.explained) == 10 and mode.timed == 10 and mode.spread < 0.05
    assert "10 of 10 timed cpu tests ran 1.50x slower together" in mode.describe()
    for ratio in RUNNER_SLOWER:
        [verdict] = rejudge([timing(ratio)], mode)
        assert verdict.status == "inconclusive" and verdict.doubt == RUNNER and not verdict.failed
        assert "the runner changed: 10 of 10 timed cpu tests ran 1.50x slower" in verdict.message
        assert verdict.ratio == pytest.approx(ratio)  # the measured change is kept, never rescaled


def test_one_test_three_times_slower_in_that_session_still_fails_on_its_ratio_over_the_common_mode() -> None:
    mode = estimate(session([*RUNNER_SLOWER[:9], 3.0]))
    assert mode is not None and len(mode.explained) == 9 and mode.timed == 10
    assert mode.ratio == pytest.approx(1.5, rel=0.02)  # the lone test does not pull the centre
    [lone] = rejudge([timing(3.0)], mode)
    assert lone.status == "regression" and lone.failed
    assert "2.00x slower than this session's common mode (9 of 10 timed cpu tests ran 1.50x slower" in lone.message
    assert lone.metric.extra["runner_relative"] == pytest.approx(2.0, rel=0.02)


def test_a_test_just_past_its_tolerance_over_the_common_mode_is_never_excused() -> None:
    mode = estimate(session(RUNNER_SLOWER))
    assert mode is not None
    [verdict] = rejudge([timing(mode.ratio * 1.12)], mode)  # 12% slower than the runner moved: past 10%
    assert verdict.status == "regression"


@pytest.mark.parametrize(
    "ratios",
    [
        [1.5] * 4,  # fewer than five moved
        [1.5] * 5 + [1.0] * 5,  # five of ten: no majority
        [1.2, 1.5, 2.0, 2.7, 3.6, 4.9, 6.6, 8.9, 12.0, 16.0],  # all slower, but no two alike: no common move
        [0.6] * 10,  # a faster runner fails nothing and is left alone
        [1.05] * 10,  # within the tolerance: nothing moved
    ],
    ids=["too-few", "no-majority", "not-similar", "faster", "within-tolerance"],
)
def test_no_common_mode(ratios: list[float]) -> None:
    assert estimate(session(ratios)) is None


def test_a_majority_of_six_in_eleven_is_a_common_mode() -> None:
    mode = estimate(session([1.5] * 6 + [1.0] * 5))
    assert mode is not None and len(mode.explained) == 6 and mode.timed == 11


def test_throughput_verdicts_count_by_their_inverse_ratio() -> None:
    points = [point(f"t{i}", "cuda", [timing(1.5, throughput=True)]) for i in range(6)]
    mode = estimate(points)
    assert mode is not None and mode.ratio == pytest.approx(1.5)
    [verdict] = rejudge([timing(1.5, throughput=True)], mode)
    assert verdict.status == "inconclusive" and verdict.doubt == RUNNER


def test_only_timing_regressions_change_memory_and_the_rest_still_judge() -> None:
    mode = estimate(session(RUNNER_SLOWER))
    assert mode is not None
    memory = Verdict(Metric("step.peak_memory", 2e6, "B", "lower", KIND_MEMORY), "regression", 1e6, 2.0, tolerance=0.05)
    unchanged, improved = timing(1.0), timing(0.5)
    out = rejudge([memory, timing(1.5), unchanged, improved], mode)
    assert out[0] is memory and out[2] is unchanged and out[3] is improved
    assert out[1].status == "inconclusive"


def test_a_verdict_only_the_machine_rule_doubted_is_judged_against_the_common_mode() -> None:
    mode = estimate(session(RUNNER_SLOWER))
    assert mode is not None
    with_it, lone = machine_doubted(1.5), machine_doubted(3.0)
    assert candidate([with_it]) and candidate([lone])
    [kept] = rejudge([with_it], mode)
    assert kept is with_it  # inconclusive already, by the more specific reason
    [failed] = rejudge([lone], mode)
    assert failed.status == "regression" and failed.doubt == "" and "inconclusive" not in failed.message
    assert failed.message.startswith("time x3.00") and "2.00x slower than this session's common mode" in failed.message


def test_a_contended_inconclusive_verdict_is_not_turned_into_a_regression() -> None:
    from pytest_gpuperf.judging.evidence import CONDITIONS, inconclusive

    contended = inconclusive(timing(3.0), "80% of the samples were contended", CONDITIONS)
    assert not candidate([contended])
    mode = estimate(session(RUNNER_SLOWER))
    assert mode is not None and rejudge([contended], mode) == [contended]


def test_possible_bounds_what_the_tests_left_could_still_make() -> None:
    assert possible(session([1.5] * 3), remaining=10)
    assert possible(session([1.5] * 5), remaining=0)
    assert not possible(session([1.5] * 4), remaining=0)  # fewer than five, nothing left
    assert not possible(session([1.5] + [1.0] * 10), remaining=2)  # most did not move, too few left to outvote them


def _nodes(n: int) -> list[str]:
    return [f"t{i}" for i in range(n)]


def test_the_watch_holds_every_suspect_until_the_session_ends_then_judges_them_together() -> None:
    watch = RunnerWatch(holds=True)
    watch.expect(_nodes(10))
    ratios = [*RUNNER_SLOWER[:9], 3.0]
    for node, ratio in zip(_nodes(10), ratios, strict=True):
        verdicts, held = watch.judge(node, "cpu", [timing(ratio)], hold=True)
        assert held and verdicts[0].status == "regression"
        watch.ran(node)
        if node != "t9":
            assert watch.releasable() == []
    released = dict(watch.releasable())
    assert sorted(released) == _nodes(10) and not watch.held
    assert [released[n][0].status for n in _nodes(9)] == ["inconclusive"] * 9
    assert released["t9"][0].status == "regression"
    assert watch.modes["t0"]["moved"] == 9 and watch.modes["t0"]["timed"] == 10
    assert watch.modes["t0"]["ratio"] == pytest.approx(1.5, rel=0.02)


def test_a_lone_regression_in_an_unmoved_session_is_released_once_no_common_mode_can_form() -> None:
    watch = RunnerWatch(holds=True)
    watch.expect(_nodes(10))
    _, held = watch.judge("t0", "cpu", [timing(3.0)], hold=True)
    assert held
    watch.ran("t0")
    released_at = None
    for node in _nodes(10)[1:]:
        watch.judge(node, "cpu", [timing(1.0)], hold=True)
        watch.ran(node)
        released = watch.releasable()
        if released:
            released_at = node
            assert released[0][0] == "t0" and released[0][1][0].status == "regression"
            break
    # after t0 and 5 unchanged, 4 left: at most 5 of 10 could move, no majority
    assert released_at == "t5" and "t0" not in watch.modes


def test_without_holding_the_watch_judges_progressively() -> None:
    watch = RunnerWatch(holds=False)
    statuses = []
    for node, ratio in zip(_nodes(10), RUNNER_SLOWER, strict=True):
        verdicts, held = watch.judge(node, "cuda", [timing(ratio)], hold=True)
        assert not held
        statuses.append(verdicts[0].status)
    # a test judged before five had moved together is judged as usual
    assert statuses == ["regression"] * 4 + ["inconclusive"] * 6


def test_a_disabled_watch_judges_nothing_against_a_common_mode() -> None:
    watch = RunnerWatch(holds=False, enabled=False)  # A/B: both sides ran on one runner
    for node in _nodes(9):
        [verdict], held = watch.judge(node, "cpu", [timing(1.5)], hold=True)
        assert verdict.status == "regression" and not held
    assert not watch.points and not watch.modes


def test_backends_have_their_own_common_mode() -> None:
    watch = RunnerWatch(holds=False)
    for node in _nodes(6):
        watch.judge(f"cpu-{node}", "cpu", [timing(1.5)], hold=False)
    [verdict], _ = watch.judge("cuda-t0", "cuda", [timing(1.5)], hold=False)
    assert verdict.status == "regression"  # the CPU's slower runner says nothing of the GPU's


def test_the_session_line_is_said_once_and_names_the_tests_judged_against_it() -> None:
    from pytest_gpuperf.reporting.records import TestRecord
    from pytest_gpuperf.reporting.runner_line import runner_section
    from pytest_gpuperf.results import verdict_to_dict

    watch = RunnerWatch(holds=True)
    watch.expect(_nodes(10))
    for node, ratio in zip(_nodes(10), [*RUNNER_SLOWER[:9], 3.0], strict=True):
        watch.judge(node, "cpu", [timing(ratio)], hold=True)
        watch.ran(node)
    records = []
    for node, verdicts in watch.releasable():
        data = {"verdicts": [verdict_to_dict(v) for v in verdicts], "runner_change": watch.modes[node]}
        records.append(TestRecord(node, "failed" if node == "t9" else "passed", 0.1, data))
    section = runner_section(records)
    assert section is not None and len(section.lines) == 1
    line = section.lines[0][0]
    assert line.startswith("gpuperf: the runner changed (cpu): 9 of 10 timed tests ran 1.50x slower together")
    assert "9 time verdict(s) inconclusive instead of failing; 1 test(s) slower than that still judged: t9" in line
    [change] = section.json["runner_changes"]
    assert change["moved"] == 9 and change["excused"] == _nodes(9) and change["against"] == ["t9"]
    assert section.markdown.startswith("> :warning: **The runner changed**: 9 of 10 timed cpu tests ran 1")
    assert "Still judged, slower than that: `t9`." in section.markdown
    assert math.isclose(change["ratio"], 1.5, rel_tol=0.02)
