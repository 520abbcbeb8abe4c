"""The clock rule: on a GPU whose SM clock moves, judge the work a step does, not the clock it happened to run at.

A power-capped GPU runs at an SM clock that depends on its temperature and on how long it idled before, so the same
step can run at clocks hundreds of MHz apart in two processes. A step's time follows that clock only partly, ``t ~
f**-a`` with ``0 <= a <= 1``, and ``a`` is a property of the step. So each measurement fits ``a`` over its own
samples and the SM clock read right before and after each of them (``clock_exponent`` +- ``clock_exponent_se``,
stored with the baseline). When the run's clock differs from the baseline's by more than :func:`clock_threshold`
(:data:`CLOCK_CHANGE`, or half a tighter tolerance), the time change is read at both ends of the band both fits
allow (:func:`exponent_band`, :func:`at_exponent`): the change of the work lies between the two, and :func:`bracket`
combines them (:func:`across_band`). With no fit on either side the band is all of [0, 1]: time (a = 0) against
cycles per step (a = 1). A memory-bound step follows the memory clock instead: its time is judged as it is, and a
changed memory clock is the machine rule's business (:func:`pytest_gpuperf.judging.evidence.machine_reason`).

The same rules judge A/B round pairs whose two sides ran at different clocks (:mod:`pytest_gpuperf.ab.clocks`).
Nothing is rescaled by another workload: the only clock used is each sample's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pytest_gpuperf.judging.clock_facts import CLOCK, CLOCK_CHANGE, follows_sm_clock
from pytest_gpuperf.judging.ratio_rule import worse_ratio
from pytest_gpuperf.results import KIND_CYCLES, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict
from pytest_gpuperf.units import format_change
from pytest_gpuperf.validate import number_or_none

__all__ = [
    "AGREED",
    "CLOCK_CHANGE",
    "across_band",
    "at_exponent",
    "at_power_cap",
    "band_of",
    "band_words",
    "bracket",
    "clocks_differ",
    "exponent_band",
    "follows_sm_clock",
    "on_cycles",
]
JUDGED = ("regression", "improvement", "unchanged")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def clocks(metric: Metric, entry: dict[str, Any] | None) -> tuple[float, float] | None:
    """The run's and the baseline's SM clocks (MHz) when both are known."""
    run, base = _number(metric.extra.get("sm_clock_mhz")), _number((entry or {}).get("sm_clock_mhz"))
    return (run, base) if run and base else None


def at_power_cap(metric: Metric, entry: dict[str, Any] | None) -> bool:
    """True when the run and its baseline both ran the step at the GPU's power cap (NVML's power-cap reason).

    At the cap the power limit, not the SM clock, sets how much work the GPU does per second, and the clock it
    reports wanders by a few percent with its temperature and voltage while the work rate holds (on the H200 a bf16
    GEMM's device time held within 0.6% across processes whose SM clocks were 4% apart). Only a larger move of the
    clock (a hotter or cooler chip) moves the rate: :func:`clock_threshold`.
    """
    return bool(metric.extra.get("power_capped")) and bool((entry or {}).get("power_capped"))


def clock_threshold(tolerance: float | None = None, capped: bool = False) -> float:
    """The SM clock change (relative) from which a timing verdict is judged across the clock-exponent band.

    :data:`CLOCK_CHANGE`, or half the ``tolerance`` when that is smaller: a step's time moves with its clock by at
    most the clock's own change (``a <= 1``), so below half the tolerance the clock alone cannot carry a reading
    across it, while at a tight tolerance (2%) a clock 2% faster than the baseline's would hide a third of a 4%
    slowdown if the time were read as it is. Not when both sides ran at the power cap (``capped``,
    :func:`at_power_cap`): there a clock within :data:`CLOCK_CHANGE` of the baseline's is the cap's own wander, and
    reading the time across the band would add the clock's noise to it.
    """
    if isinstance(tolerance, (int, float)) and tolerance > 0 and not capped:
        return min(CLOCK_CHANGE, tolerance / 2.0)
    return CLOCK_CHANGE


def clocks_differ(run_mhz: float, base_mhz: float, tolerance: float | None = None, capped: bool = False) -> bool:
    """True when an SM clock is more than :func:`clock_threshold` off another: another GPU state, not the same."""
    return abs(run_mhz / base_mhz - 1.0) > clock_threshold(tolerance, capped)


def clock_changed(metric: Metric, entry: dict[str, Any] | None, tolerance: float | None = None) -> bool:
    """True when the run's SM clock is more than :func:`clock_threshold` off the baseline's."""
    pair = clocks(metric, entry)
    return pair is not None and clocks_differ(*pair, tolerance, at_power_cap(metric, entry))


def bracket(time_status: str, cycles_status: str) -> str | None:
    """The verdict on the step's work from its time's and its cycles' verdicts; None when they disagree on a fail.

    A step's time follows the SM clock partly (``t ~ f**-a`` with ``0 <= a <= 1``: fully for pure arithmetic, not at
    all for DRAM traffic), so its change of work lies between the change of its time and the change of its cycles.
    Both past the tolerance: a regression; neither: it passes (an improvement when both say so); one only: the
    evidence straddles the tolerance.
    """
    if time_status == cycles_status:
        return time_status
    if "regression" in (time_status, cycles_status):
        return None
    return "unchanged"


#: Standard errors either side of a fitted clock exponent that its band spans (about 95%).
EXPONENT_BAND_SE = 2.0


def exponent_band(metric: Metric, entry: dict[str, Any] | None) -> tuple[float, float] | None:
    """The exponents ``a`` (``t ~ f**-a``) that the run's and the baseline's own samples allow, within [0, 1].

    Each side fitted its samples' times against the SM clock read around each of them
    (:attr:`~pytest_gpuperf.timing.sampling.TimingResult.clock_exponent`); the band spans both fits,
    :data:`EXPONENT_BAND_SE` standard errors either side. None when neither side could fit (its clock hardly
    moved): then all of [0, 1] is possible and :func:`bracket` judges time against cycles.
    """
    return band_of([metric.extra, entry or {}])


def band_of(sides: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The hull of each fit's ``clock_exponent`` +- :data:`EXPONENT_BAND_SE` standard errors, within [0, 1]; None
    when no side has a fit."""
    lows, highs = [], []
    for facts in sides:
        a, se = number_or_none(facts.get("clock_exponent")), number_or_none(facts.get("clock_exponent_se"))
        if a is not None and se is not None and se >= 0:
            lows.append(a - EXPONENT_BAND_SE * se)
            highs.append(a + EXPONENT_BAND_SE * se)
    if not lows:
        return None
    return min(max(min(lows), 0.0), 1.0), max(min(max(highs), 1.0), 0.0)


def at_exponent(ratio: float, clock_ratio: float, exponent: float, better: str) -> float:
    """The change of a step's work from its change of time (or throughput) ``ratio`` when its SM clock changed by
    ``clock_ratio`` (run / baseline, B / A) and its time follows the clock as ``f**-exponent``."""
    return ratio * worse_ratio(clock_ratio, better) ** exponent


#: One end of the band: the work's change there and its status (None: the rule could not decide there).
End = tuple[float, str | None]


def across_band(band: tuple[float, float], judge_at: Callable[[float], End]) -> tuple[tuple[float, float], str | None]:
    """Judge at both ends of the exponent ``band`` (``judge_at(a)``: the change and its status, None when it cannot
    decide): the work's change, low to high, and :func:`bracket` of both ends (None: they disagree on a fail)."""
    (low, status_low), (high, status_high) = (judge_at(a) for a in band)
    status = bracket(status_low, status_high) if status_low and status_high else None
    return (min(low, high), max(low, high)), status


def band_words(band: tuple[float, float], changes: tuple[float, float]) -> tuple[str, str]:
    """How the band reads in a message: the exponents and the work's change between them."""
    return f"f^-{band[0]:.2f}..f^-{band[1]:.2f}", f"{format_change(changes[0])}..{format_change(changes[1])}"


def _on_band(verdict: Verdict, band: tuple[float, float], run_mhz: float, base_mhz: float, where: str) -> Verdict:
    """The timing verdict judged at both ends of the clock-exponent band: the work changed by between the two."""
    from pytest_gpuperf.judging.compare import status_of

    metric, tolerance = verdict.metric, verdict.tolerance or 0.0
    ratio = float(verdict.ratio or 1.0)
    low_ci, high_ci = verdict.ci or (ratio, ratio)

    def judge_at(a: float) -> End:
        work, low, high = (at_exponent(r, run_mhz / base_mhz, a, metric.better) for r in (ratio, low_ci, high_ci))
        return work, status_of(work, low, high, metric.better, tolerance)

    changes, status = across_band(band, judge_at)
    ends = [at_exponent(r, run_mhz / base_mhz, a, metric.better) for a in band for r in (low_ci, high_ci)]
    exponents, changed = band_words(band, changes)
    evidence = (
        f"{metric.label()} {format_change(ratio)} at SM clock {run_mhz:.0f} MHz (baseline {base_mhz:.0f} MHz); "
        f"its time follows the SM clock as {exponents} (fitted on each sample's own clock), "
        f"so its work changed by {changed}, tolerance {tolerance:.0%}"
    )
    metric.extra["judged_on"] = "time+clock exponent"
    metric.extra["work_change"] = [round(c, 4) for c in changes]
    metric.extra["work_interval"] = [round(min(ends), 4), round(max(ends), 4)]  # each end's own 95% interval too
    if status is None:
        return _straddles(verdict, "regression", f"{evidence} on {where}", "that range straddles the tolerance")
    return replace(verdict, status=status, message=f"{evidence}: {BAND_AGREED[status]} on {where}")


def on_cycles(
    verdict: Verdict,
    entry: dict[str, Any] | None,
    cycles: Metric | None,
    cycles_entry: dict[str, Any] | None,
    where: str,
) -> Verdict | None:
    """The timing ``verdict`` judged on time *and* cycles per step when the SM clock moved, or None (time decides).

    None when the clock did not move, the step is memory-bound, or either side has no cycles (an old
    baseline, no NVML): the machine rule then says what the evidence allows. Otherwise :func:`bracket` decides,
    and a straddle is inconclusive (doubt ``clock``: alone it cannot decide; a fresh process that reads the change
    past the tolerance too decides with it, :mod:`pytest_gpuperf.judging.agreement`).
    """
    from pytest_gpuperf.judging.compare import judge

    metric = verdict.metric
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT) or verdict.status not in JUDGED:
        return None
    for key in ("judged_on", "work_change", "work_interval", "cycles_change"):
        metric.extra.pop(key, None)  # another judgement's facts (a replica judged its own metric before)
    if not clock_changed(metric, entry, verdict.tolerance):
        return None
    if not follows_sm_clock(metric.extra.get("bound")) or metric.extra.get("throttled"):
        return None  # memory-bound: time decides; throttled: the machine rule says so
    band = exponent_band(metric, entry)
    if band is not None and isinstance(verdict.ratio, (int, float)):
        run_mhz, base_mhz = clocks(metric, entry) or (1.0, 1.0)
        return _on_band(verdict, band, run_mhz, base_mhz, where)
    if cycles is None or not isinstance(cycles_entry, dict):
        return None
    judged = replace(cycles, judged=True, kind=KIND_CYCLES)
    by_cycles = judge(judged, cycles_entry, verdict.tolerance or 0.0, where)
    if by_cycles.status not in JUDGED or by_cycles.ratio is None:
        return None
    run_mhz, base_mhz = clocks(metric, entry) or (0.0, 0.0)
    time_change = format_change(verdict.ratio) if isinstance(verdict.ratio, (int, float)) else "?"
    interval = f" (95% CI {format_change(by_cycles.ci[0])}..{format_change(by_cycles.ci[1])})" if by_cycles.ci else ""
    evidence = (
        f"{metric.label()} {time_change} at SM clock {run_mhz:.0f} MHz (baseline {base_mhz:.0f} MHz), cycles per step "
        f"(device time x SM clock) {format_change(by_cycles.ratio)}{interval}, tolerance {verdict.tolerance or 0:.0%}"
    )
    metric.extra["judged_on"] = "time+cycles"
    metric.extra["cycles_change"] = by_cycles.ratio
    metric.extra["work_interval"] = _between(verdict, by_cycles)
    status = bracket(verdict.status, by_cycles.status)
    if status is None:
        suspected = verdict.status if verdict.status == "regression" else by_cycles.status
        between = "the work changed by between the two, which straddles the tolerance"
        return _straddles(verdict, suspected, f"{evidence} on {where}", between)
    return replace(verdict, status=status, message=f"{evidence}: {AGREED[status]} on {where}")


def _between(verdict: Verdict, by_cycles: Verdict) -> list[float]:
    """The change of the work from the time's and the cycles' 95% intervals together, in the timing metric's own
    direction (a throughput's cycles read inverted): the work changed by somewhere between them."""
    ends = [*(verdict.ci or ()), float(verdict.ratio or 1.0)]
    for cycles in [*(by_cycles.ci or ()), float(by_cycles.ratio or 1.0)]:
        ends.append(worse_ratio(cycles, verdict.metric.better))  # cycles are lower-better: the same orientation
    return [round(min(ends), 4), round(max(ends), 4)]


def _straddles(verdict: Verdict, suspected: str, evidence: str, what: str) -> Verdict:
    """``verdict`` inconclusive because the clock moved and the work's change straddles the tolerance (doubt
    :data:`~pytest_gpuperf.judging.clock_facts.CLOCK`: a fresh process's reading may agree past it)."""
    reason = f"the SM clock moved and {what}; lock the GPU's clocks on this runner or compare with --gpuperf-ab"
    return replace(
        verdict,
        status="inconclusive",
        suspected=suspected,
        doubt=CLOCK,
        reason=reason,
        message=f"{evidence}: inconclusive, {reason}",
    )


#: What the two ends of the exponent band said together, by the status :func:`bracket` gave.
BAND_AGREED = {
    "regression": "both ends past it",
    "improvement": "both ends better beyond it",
    "unchanged": "neither end past it",
}
#: What time and cycles said together, by the status :func:`bracket` gave.
AGREED = {"regression": "both past it", "improvement": "both better beyond it", "unchanged": "neither past it"}
