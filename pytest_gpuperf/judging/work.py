"""Counted work per step: a verdict when a step's FLOPs or bytes differ from its baseline's.

The analytic verdict counts each measured step once (``flops=`` / ``bytes_moved=`` hints win over the
count, :mod:`pytest_gpuperf.profiling.counting`), and stores the two counts as ``<step>.flops_per_step``
and ``<step>.bytes_per_step`` (kind :data:`~pytest_gpuperf.results.KIND_WORK`). The counts are exact
for the same code (a dispatch-mode count, or the test's own hints), so a change beyond
:data:`WORK_TOLERANCE` (the file's 6 significant digits, with room) means the test's workload
changed: its verdict is ``changed`` (fails the test) and says by how much ("bytes per step 96.00 MiB vs
48.00 MiB: the test's workload changed; if intended, re-record"). The time and throughput verdicts of
that step are then another finding than "the same work got slower": they become inconclusive with
that reason (:func:`explain_timing`). Work verdicts judge on every machine: another machine's speed
does not change what a step counts.
"""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, KIND_WORK, Metric, Verdict

#: Relative difference of two counts that is counting noise (rounding to 6 digits), not another workload.
WORK_TOLERANCE = 0.01
#: Last part of the work metrics' names, with their units.
FLOPS, BYTES = "flops_per_step", "bytes_per_step"
WORK_UNITS = {FLOPS: "FLOP", BYTES: "B"}
#: The doubt an inconclusive timing verdict carries when its step's work changed.
WORK = "work"
RERECORD = "pytest --gpuperf --gpuperf-update"


def work_metrics(name: str, flops: float, bytes_moved: float, sources: dict[str, Any]) -> list[Metric]:
    """``<name>.flops_per_step`` and ``<name>.bytes_per_step`` (judged, exact within :data:`WORK_TOLERANCE`)."""
    out = []
    for last, value, source in (
        (FLOPS, flops, sources.get("flops_source")),
        (BYTES, bytes_moved, sources.get("bytes_source")),
    ):
        number = float(value)
        stored: float | int = int(number) if number.is_integer() else number
        extra = {"source": source} if source else {}
        out.append(
            Metric(
                f"{name}.{last}", stored, WORK_UNITS[last], "equal", KIND_WORK, tolerance=WORK_TOLERANCE, extra=extra
            )
        )
    return out


def format_work(value: Any, unit: str) -> str:
    """``96.00 MiB``, ``2.15 GFLOP``: a count at a glance."""
    from pytest_gpuperf.units import format_bytes, format_rate

    if not isinstance(value, (int, float)):
        return str(value)
    return format_bytes(value) if unit == "B" else format_rate(float(value), unit)


def judge_work(metric: Metric, entry: dict[str, Any], tolerance: float, where: str) -> Verdict:
    """A work metric against its baseline entry: ``unchanged`` within ``tolerance``, else ``changed``."""
    base = entry.get("value")
    value = metric.value
    if not isinstance(base, (int, float)) or not isinstance(value, (int, float)):
        return Verdict(metric, "changed", baseline=base, message=f"{metric.label()} changed: {base} -> {value}")
    if float(base) == 0.0:
        ratio = 1.0 if float(value) == 0.0 else float("inf")
    else:
        ratio = float(value) / float(base)
    if abs(ratio - 1.0) <= tolerance:
        return Verdict(metric, "unchanged", baseline=base, ratio=ratio, tolerance=tolerance)
    by = f"{ratio:.3g}x" if ratio != float("inf") else "from none"
    message = (
        f"{metric.label()} {format_work(value, metric.unit)} vs {format_work(base, metric.unit)} ({by}) on {where}: "
        f"the test's workload changed; if intended, re-record ({RERECORD})"
    )
    ratio_shown = ratio if ratio != float("inf") else None
    return Verdict(metric, "changed", baseline=base, ratio=ratio_shown, tolerance=tolerance, message=message)


def unrecorded(metric: Metric) -> Verdict:
    """A work metric whose test has a baseline without it (recorded before work was stored): shown, not judged."""
    return Verdict(
        metric,
        "info",
        message=f"{metric.label()}: not in this test's baseline (recorded by an older pytest-gpuperf); re-record to "
        "judge the step's work",
    )


def explain_timing(verdicts: list[Verdict]) -> list[Verdict]:
    """Time/throughput verdicts of a step whose counted work changed: inconclusive, saying the work changed."""
    from pytest_gpuperf.judging.evidence import JUDGED, inconclusive

    changed: dict[str, list[str]] = {}
    for verdict in verdicts:
        step, _, last = verdict.metric.name.rpartition(".")
        if verdict.metric.kind == KIND_WORK and verdict.status == "changed" and last in WORK_UNITS:
            unit = verdict.metric.unit
            changed.setdefault(step, []).append(
                f"{verdict.metric.label()} {format_work(verdict.metric.value, unit)} vs "
                f"{format_work(verdict.baseline, unit)}"
            )
    if not changed:
        return verdicts
    out = []
    for verdict in verdicts:
        step = verdict.metric.name.rpartition(".")[0]
        timing = verdict.metric.kind in (KIND_TIME, KIND_THROUGHPUT)
        # The work explains the time whatever another rule said (a contended run's doubt would send the step to a
        # fresh-process confirmation that the changed workload makes meaningless).
        if timing and step in changed and verdict.status in (*JUDGED, "inconclusive"):
            reason = (
                f"the step's work changed ({'; '.join(changed[step])}), so this is not the same work getting "
                "slower or faster; if the new workload is intended, re-record"
            )
            out.append(inconclusive(verdict, reason, WORK))
        else:
            out.append(verdict)
    return out
