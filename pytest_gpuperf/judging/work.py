"""Counted work per step: a verdict when a step's FLOPs or bytes differ from its baseline's.

The analytic verdict counts each measured step once (``flops=`` / ``bytes_moved=`` hints win over the
count, :mod:`pytest_gpuperf.profiling.counting`), and stores the two counts as ``<step>.flops_per_step``
and ``<step>.bytes_per_step`` (kind :data:`~pytest_gpuperf.results.KIND_WORK`). The counts are exact
for the same code (a dispatch-mode count, or the test's own hints), so a change beyond
:data:`WORK_TOLERANCE` (the file's 6 significant digits, with room) is another amount of work per step:

* **less work** (an optimisation, or a ``flops=`` hint corrected downward): ``improvement``, which passes and
  names the command that records the gain (``bytes per step 26.02 MiB -> 21.68 MiB (0.833x): the step does less
  work, an improvement; lock it in with: pytest --gpuperf --gpuperf-update 'id'``);
* **more work** (redundant work, or a workload grown on purpose): ``changed``, which fails, saying first how much
  more the step does (``the step now does 2x the work (bytes per step 13.01 MiB -> 26.02 MiB)``).

The step's time and throughput verdicts are judged as usual beside it, their messages saying the work moved
(``throughput -19.5% ...; with +38.0% bytes per step: the step does more work``), so a slowdown that came
with the extra work is reported, never filed as inconclusive (:func:`explain_timing`). Work verdicts judge on
every machine: another machine's speed does not change what a step counts.
"""

from __future__ import annotations

from dataclasses import replace
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


def judge_work(metric: Metric, entry: dict[str, Any], tolerance: float, where: str, node_id: str = "") -> Verdict:
    """A work metric against its baseline entry: ``unchanged`` within ``tolerance``, ``improvement`` for less
    work, ``changed`` (failing) for more (module doc); ``node_id`` names the test in the command to record."""
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
    from pytest_gpuperf.commands import update_command

    command = update_command([node_id]) if node_id else RERECORD
    moved = f"{metric.label()} {format_work(base, metric.unit)} -> {format_work(value, metric.unit)}"
    if ratio < 1.0:
        message = (
            f"{moved} ({ratio:.3g}x) on {where}: the step does less work, an improvement; lock it in with: {command}"
        )
        return Verdict(metric, "improvement", baseline=base, ratio=ratio, tolerance=tolerance, message=message)
    message = (
        f"{more_work(ratio)} ({moved}) on {where}: the code does more work per step; if the test's workload "
        f"grew on purpose, re-record with: {command}"
    )
    ratio_shown = ratio if ratio != float("inf") else None
    return Verdict(metric, "changed", baseline=base, ratio=ratio_shown, tolerance=tolerance, message=message)


def more_work(ratio: float | None) -> str:
    """``the step now does 2x the work`` (``... work where it did none`` from a zero count)."""
    if ratio is None or ratio == float("inf"):
        return "the step now does work where it did none"
    return f"the step now does {ratio:.3g}x the work"


def unrecorded(metric: Metric) -> Verdict:
    """A work metric whose test has a baseline without it (recorded before work was stored): shown, not judged."""
    return Verdict(
        metric,
        "info",
        message=f"{metric.label()}: not in this test's baseline (recorded by an older pytest-gpuperf); re-record to "
        "judge the step's work",
    )


def explain_timing(verdicts: list[Verdict]) -> list[Verdict]:
    """Verdicts of steps whose counted work moved: the failing work verdict first, and each time/throughput
    verdict of the step still judged, its message saying how the work moved (module doc)."""
    from pytest_gpuperf.judging.evidence import JUDGED
    from pytest_gpuperf.units import format_change

    moved: dict[str, list[str]] = {}
    for verdict in verdicts:
        step, _, last = verdict.metric.name.rpartition(".")
        if verdict.metric.kind == KIND_WORK and verdict.status in ("changed", "improvement") and last in WORK_UNITS:
            ratio = verdict.ratio
            change = format_change(ratio) if ratio is not None else "from none"
            more = ratio is None or ratio > 1.0
            moved.setdefault(step, []).append(
                f"{change} {verdict.metric.label()}: the step does {'more' if more else 'less'} work"
            )
    if not moved:
        return verdicts
    out = []
    for verdict in verdicts:
        step = verdict.metric.name.rpartition(".")[0]
        timing = verdict.metric.kind in (KIND_TIME, KIND_THROUGHPUT)
        if timing and step in moved and verdict.status in JUDGED and verdict.message:
            verdict = replace(verdict, message=f"{verdict.message}; with {'; '.join(moved[step])}")
        out.append(verdict)
    # The headline names a step's extra work first, the slowdown that came with it beside it.
    return sorted(out, key=lambda v: not (v.metric.kind == KIND_WORK and v.status == "changed"))
