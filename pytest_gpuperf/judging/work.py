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

The step's time and throughput verdicts say the work moved beside their own change. A slowdown past the tolerance
that came with more work is a changed workload that fails with its size (``throughput -19.5% with +38.4% bytes per
step: the step does more work, a changed workload``), never an inconclusive timing; any other timing verdict is
judged as usual, its message saying how the work moved (:func:`explain_timing`). Work verdicts judge on every
machine: another machine's speed does not change what a step counts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, KIND_WORK, Metric, Verdict
from pytest_gpuperf.units import format_change

#: Relative difference of two counts that is counting noise (rounding to 6 digits), not another workload.
WORK_TOLERANCE = 0.01
#: Last part of the work metrics' names, with their units.
FLOPS, BYTES = "flops_per_step", "bytes_per_step"
WORK_UNITS = {FLOPS: "FLOP", BYTES: "B"}
#: The key of a timing metric's ``extra`` that tags its verdict as a changed workload: how the counted work moved
#: (``+38.4% bytes per step``). Such a verdict fails with the work, and no confirmation is spent on it.
WORKLOAD = "workload_change"
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
    """Verdicts of steps whose counted work moved: the failing work verdict first, each time/throughput verdict of
    the step saying how the work moved beside its own change (module doc).

    More work with a time or throughput that reads worse past its tolerance is a changed workload: a
    ``regression`` tagged :data:`WORKLOAD` that says how much slower the step is and why (``throughput -19.5% with
    +38.4% bytes per step: the step does more work``), whatever another rule doubted about the timing alone (the
    baseline measured another workload, so its noise rules do not apply to it). Less work leaves the timing
    verdict to its own rules: a slower step that does less work is a regression of the code itself.
    """
    moved: dict[str, tuple[list[str], bool]] = {}
    for verdict in verdicts:
        verdict.metric.extra.pop(WORKLOAD, None)  # an earlier judgement's tag (the same metrics judged again)
    for verdict in verdicts:
        step, _, last = verdict.metric.name.rpartition(".")
        if verdict.metric.kind == KIND_WORK and verdict.status in ("changed", "improvement") and last in WORK_UNITS:
            ratio = verdict.ratio
            change = format_change(ratio) if ratio is not None else "from none"
            changes, more = moved.get(step, ([], False))
            moved[step] = ([*changes, f"{change} {verdict.metric.label()}"], more or ratio is None or ratio > 1.0)
    if not moved:
        return verdicts
    out = [_with_work(v, *moved[step]) if (step := v.metric.name.rpartition(".")[0]) in moved else v for v in verdicts]
    # The headline names a step's extra work first, the slowdown that came with it beside it.
    return sorted(out, key=lambda v: not (v.metric.kind == KIND_WORK and v.status == "changed"))


def _with_work(verdict: Verdict, changes: list[str], more: bool) -> Verdict:
    """One verdict of a step whose work moved by ``changes`` (``more``: it does more work): see
    :func:`explain_timing`."""
    from pytest_gpuperf.judging.evidence import JUDGED
    from pytest_gpuperf.judging.ratio_rule import worse_ratio

    metric = verdict.metric
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT) or not verdict.message:
        return verdict
    work = " and ".join(changes)
    does = f"the step does {'more' if more else 'less'} work"
    ratio, tolerance = verdict.ratio, verdict.tolerance or 0.0
    slower = isinstance(ratio, (int, float)) and ratio > 0 and worse_ratio(ratio, metric.better) > 1.0 + tolerance
    if more and slower and verdict.status in (*JUDGED, "inconclusive"):
        metric.extra[WORKLOAD] = work
        head = verdict.message.split(": inconclusive, ", 1)[0]  # the numbers, not a doubt about another workload
        message = f"{metric.label()} {format_change(float(ratio))} with {work}: {does}, a changed workload; {head}"
        return replace(verdict, status="regression", suspected="", doubt="", reason="", message=message)
    if verdict.status in JUDGED:
        return replace(verdict, message=f"{verdict.message}; with {work}: {does}")
    return verdict
