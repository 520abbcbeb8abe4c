"""The clock rule: on a GPU whose SM clock moves, judge the work a step does, not the clock it ran at.

A power-capped GPU (the H200 at 700 W under a large GEMM) runs at an SM clock that depends on its
temperature and on how long it idled before: 1410-1935 MHz were read across pytest processes for the
same step. A compute-bound step's time follows that clock; its *cycles per step* (device time x SM clock,
read by NVML right before and after every timed sample) do not: 0.3-0.9% between processes where times
spread 4%. So when the run's SM clock differs from the baseline's by more than :data:`CLOCK_CHANGE`,
the timing verdict is decided by the step's cycles against the baseline's cycles, at the same tolerance,
and the report shows both. A memory-bound step follows the memory clock instead (fixed on the H200:
3201 MHz in every reading): its time is judged as it is, and a changed memory clock is the machine
rule's business (:func:`pytest_gpuperf.judging.evidence.machine_reason`).

Nothing is rescaled: both numbers are measured, each from the same samples.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_gpuperf.results import KIND_CYCLES, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict
from pytest_gpuperf.units import format_change

#: An SM clock this much off the baseline's (relative) is another machine state: the cycles decide.
CLOCK_CHANGE = 0.03
#: Bound classes whose time does not follow the SM clock.
NOT_SM_CLOCKED = ("memory-bound",)
JUDGED = ("regression", "improvement", "unchanged")


def cycles_name(metric_name: str) -> str:
    """``step.time`` / ``step.throughput`` -> ``step.cycles``."""
    return metric_name.rpartition(".")[0] + ".cycles"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def clocks(metric: Metric, entry: dict[str, Any] | None) -> tuple[float, float] | None:
    """The run's and the baseline's SM clocks (MHz) when both are known."""
    run, base = _number(metric.extra.get("sm_clock_mhz")), _number((entry or {}).get("sm_clock_mhz"))
    return (run, base) if run and base else None


def clock_changed(metric: Metric, entry: dict[str, Any] | None) -> bool:
    """True when the run's SM clock is more than :data:`CLOCK_CHANGE` off the baseline's."""
    pair = clocks(metric, entry)
    return pair is not None and abs(pair[0] / pair[1] - 1.0) > CLOCK_CHANGE


def follows_sm_clock(bound: Any) -> bool:
    """True unless the step is memory-bound (its time follows the memory clock, not the SM clock)."""
    return bound not in NOT_SM_CLOCKED


def on_cycles(
    verdict: Verdict,
    entry: dict[str, Any] | None,
    cycles: Metric | None,
    cycles_entry: dict[str, Any] | None,
    where: str,
) -> Verdict | None:
    """The timing ``verdict`` decided by cycles per step when the SM clock moved, or None (time decides).

    None when the clock did not move, the step is memory-bound, or either side has no cycles (an old
    baseline, no NVML): the machine rule then says what the evidence allows.
    """
    from pytest_gpuperf.judging.compare import judge

    metric = verdict.metric
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT) or verdict.status not in JUDGED:
        return None
    if cycles is None or not isinstance(cycles_entry, dict) or not clock_changed(metric, entry):
        return None
    if not follows_sm_clock(metric.extra.get("bound")):
        return None
    judged = replace(cycles, judged=True, kind=KIND_CYCLES)
    by_cycles = judge(judged, cycles_entry, verdict.tolerance or 0.0, where)
    if by_cycles.status not in JUDGED or by_cycles.ratio is None:
        return None
    run_mhz, base_mhz = clocks(metric, entry) or (0.0, 0.0)
    ratio, ci = by_cycles.ratio, by_cycles.ci
    if metric.kind == KIND_THROUGHPUT:  # items per cycle: the inverse of cycles per step
        ratio = 1.0 / ratio
        ci = (1.0 / ci[1], 1.0 / ci[0]) if ci else None
    time_change = format_change(verdict.ratio) if isinstance(verdict.ratio, (int, float)) else "?"
    interval = f", 95% CI {format_change(by_cycles.ci[0])}..{format_change(by_cycles.ci[1])}" if by_cycles.ci else ""
    message = (
        f"{metric.label()} {time_change} at SM clock {run_mhz:.0f} MHz (baseline {base_mhz:.0f} MHz); judged on "
        f"cycles per step (device time x SM clock): {format_change(by_cycles.ratio)}{interval}, "
        f"tolerance {verdict.tolerance or 0:.0%} on {where}"
    )
    metric.extra["judged_on"] = "cycles"
    metric.extra["cycles_change"] = by_cycles.ratio
    return replace(verdict, status=by_cycles.status, ratio=ratio, ci=ci, message=message)
