"""When the evidence cannot decide: the reasons a verdict becomes *inconclusive*, and what would make it decidable.

A perf gate must neither fail unchanged code nor pass a regression, so when the machine
cannot tell them apart the verdict says so instead of guessing:

* the step never settled during warm-up (the timing loop's ``settled`` flag): its transient is not judged;
* the host CPU's calibration differs from the one stored with the baseline (another machine of the same model,
  :mod:`pytest_gpuperf.timing.calibration`);
* the GPU ran at another SM clock than when the baseline was recorded, or was throttled (NVML readings);
* a change past the tolerance measured while the measuring thread waited for a CPU (the contention guard);
* a change past the tolerance that the spread *between processes* recorded in the baseline can explain;
* a confirmation in a fresh process that disagrees with the first measurement;
* a bound class that changed while the step's FLOPs per byte did not: only its speed moved.

Inconclusive passes with a visible warning unless ``--gpuperf-strict``. No rescaling of ratios happens here:
the measured change is always the one shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.judging.clock_facts import CLOCK_CHANGE, follows_sm_clock
from pytest_gpuperf.results import KIND_CATEGORY, KIND_THROUGHPUT, KIND_TIME, Verdict
from pytest_gpuperf.units import format_change
from pytest_gpuperf.validate import number_or_none

#: A memory clock this much off the baseline's (relative) measures another machine for a memory-bound step.
MEM_CLOCK_CHANGE = 0.01
#: A contended run that reads more than this many times slower is still a regression (neighbours' load shares
#: caches and memory bandwidth, it does not multiply a step's own time by more; an unsettled warm-up can).
CONTENTION_LIMIT = 2.0
#: Arithmetic intensities closer than this (relative) are the same step.
SAME_INTENSITY = 0.01
QUIETER = "run on a quieter runner"
JUDGED = ("regression", "improvement", "unchanged")


def _worse(verdict: Verdict) -> float | None:
    ratio = verdict.ratio
    if not isinstance(ratio, (int, float)) or ratio <= 0:
        return None
    return ratio if verdict.metric.better == "lower" else 1.0 / ratio


#: Doubts a fresh process can clear (its own run may settle and run uncontended; a host in another speed state,
#: :data:`STATE`, may be back in the recording's) and those it cannot.
CONDITIONS, MACHINE, SPREAD, CONFIRMATION, BOUND = "conditions", "machine", "spread", "confirmation", "bound"
STATE = "state"
#: The doubts a confirmation in a fresh process may clear.
CLEARABLE = (CONDITIONS, STATE)

#: What a rule finds: ``(doubt, reason)``; the reason says what the evidence showed and what would fix it, and its
#: first clause (up to the first ``"; "``) reads on its own: the verdict column shows only that.
Doubt = tuple[str, str]
#: A rule of the timing verdicts: :class:`Evidence` -> ``Doubt | None``.
Rule = Callable[["Evidence"], "Doubt | None"]


@dataclass(frozen=True)
class Evidence:
    """What a rule reads: the verdict (its metric's extra holds the run's facts), the baseline entry, the test."""

    verdict: Verdict
    entry: dict[str, Any] | None
    node_id: str = ""
    #: The verdict was decided by cycles per step because the SM clock moved (:mod:`.clock_rule`).
    clock_decided: bool = False


def clock_rule(evidence: Evidence) -> Doubt | None:
    """The machine state differed from the baseline's (clocks, throttling): :func:`machine_reason`.

    A host calibration off by less than one machine's speed states span is :data:`STATE` (a fresh process may
    read the recording's state and judge); further off, or a GPU's clocks, is :data:`MACHINE`.
    """
    from pytest_gpuperf.judging.machine_rule import machine_change, speed_state

    verdict = evidence.verdict
    extra, tolerance = verdict.metric.extra, verdict.tolerance
    calibrated = machine_change(extra, evidence.entry, tolerance)
    if calibrated:
        return (STATE if speed_state(extra, evidence.entry) else MACHINE), calibrated
    reason = machine_reason(extra, evidence.entry, evidence.clock_decided, tolerance)
    return (MACHINE, reason) if reason else None


def spread_rule(evidence: Evidence) -> Doubt | None:
    """The baseline's processes spread wider than the tolerance, and the change lies within that band.

    A short host-CPU step's band is at least :data:`SHORT_STEP_STATES` (:func:`short_host_step`), whatever the
    processes that recorded it happened to show.
    """
    verdict, entry = evidence.verdict, evidence.entry
    recorded_spread = number_or_none((entry or {}).get("process_spread"))
    short = short_host_step(verdict, entry)
    spread = max(recorded_spread or 0.0, SHORT_STEP_STATES) if short else recorded_spread
    worse, tolerance = _worse(verdict), verdict.tolerance or 0.0
    if spread is None or spread <= tolerance or worse is None:
        return None
    # Whole processes differ by more than the tolerance: no verdict inside that band is evidence (an
    # "unchanged" or "improved" run may be a slower step in a fast process). Another run cannot clear it.
    if max(worse, 1.0 / worse) - 1.0 > spread + tolerance:
        return None
    recorded = number_or_none((entry or {}).get("processes"))
    if short and spread > (recorded_spread or 0.0):
        return SPREAD, short_step_reason(spread, tolerance)
    return SPREAD, spread_fix(spread, tolerance, evidence.node_id, "this test's", "here", recorded)


#: A host-CPU step that takes less than this share of one calibration call (:mod:`pytest_gpuperf.timing.calibration`,
#: tens of microseconds) is short: its time is mostly dispatch and the placement of a few small buffers, which a whole
#: process keeps from start to end, so fresh processes of one machine land in a fast or a slow state of it
#: (``docs/PERFORMANCE.md``: a 4 us step read +52% in 2 of 7 fresh processes, its recording's 3 all fast).
SHORT_STEP_CALLS = 0.25
#: The least spread between processes a short host-CPU step is judged with: a change within this band plus the
#: tolerance is inconclusive however closely the recording's processes agreed; past it, the step is judged.
SHORT_STEP_STATES = 0.5


def short_host_step(verdict: Verdict, entry: dict[str, Any] | None) -> bool:
    """True for a host-CPU time whose baseline step is shorter than :data:`SHORT_STEP_CALLS` calibration calls."""
    base, calibration = number_or_none((entry or {}).get("value")), number_or_none((entry or {}).get("calibration"))
    return (
        verdict.metric.kind == KIND_TIME
        and number_or_none(verdict.metric.extra.get("calibration")) is not None
        and base is not None
        and calibration is not None
        and 0 < base < SHORT_STEP_CALLS * calibration
    )


def short_step_reason(spread: float, tolerance: float) -> str:
    """Why a short host-CPU step's change within its process-state band is not evidence, and what would decide."""
    return (
        f"a host-CPU step this short (under {SHORT_STEP_CALLS:g} calls of the calibration kernel) varies up to "
        f"{spread:.0%} between fresh processes of one machine (its dispatch and buffer placement are fixed per "
        f"process), so a change within {spread:.0%} plus the {tolerance:.0%} tolerance is not judged; make the step "
        "longer (several calls per measured step) for a tighter gate"
    )


def replacing_processes(recorded: float | None) -> int:
    """Processes a re-record needs to replace an entry that cannot decide: two more than it was recorded from, so
    the new spread is more evidence, not a luckier draw (:func:`pytest_gpuperf.baselines.policy.undecidable`)."""
    return int(recorded or 1) + 2


def spread_fix(
    spread: float, tolerance: float, node_id: str, whose: str, when: str, recorded: float | None = None
) -> str:
    """A spread between processes too wide for the tolerance: what it means and the two fixes (one a command)."""
    from pytest_gpuperf.commands import update_command

    wanted = math.ceil(spread * 20 - 1e-9) / 20  # the next 5% at or above the spread: the band the gate can judge
    processes = replacing_processes(recorded)
    command = update_command([node_id], processes=processes)
    rerecord = f"re-record on a quieter runner with: {command}" if node_id else f"re-record {QUIETER}"
    return (
        f"{whose} spread between processes is {spread:.0%} {when}; a {tolerance:.0%} tolerance cannot be judged on "
        f"this machine: raise time_tolerance to {wanted:.0%} (@pytest.mark.gpuperf(time_tolerance={wanted:g})) or "
        f"{rerecord} (from {processes} processes it replaces an entry that cannot decide)"
    )


def conditions_rule(evidence: Evidence) -> Doubt | None:
    """An unsettled warm-up or a contended run made a suspected change untrustworthy."""
    verdict = evidence.verdict
    if verdict.status == "unchanged":
        return None  # an unsettled or contended run only ever reads slower: "unchanged" still holds
    extra, worse = verdict.metric.extra, _worse(verdict)
    conditions = conditions_reason(extra)
    limit = contention_limit(extra, verdict.tolerance or 0.0)
    if conditions and extra.get("settled") is not False and worse is not None and worse > limit:
        return None  # far past what a busy machine does to the thread's own time: still decisive
    return (CONDITIONS, conditions) if conditions else None


#: The largest share of waiting a script's ranks may show that still bounds what it explains (4x at most).
MAX_RANK_WAIT = 0.75


def contention_limit(extra: dict[str, Any], tolerance: float) -> float:
    """The slowdown a contended run may show and still be inconclusive: :data:`CONTENTION_LIMIT` for a sample's
    thread time; for a wall-clocked script whose ranks waited for a CPU a share ``w`` of their time
    (``rank_wait_share``, :mod:`pytest_gpuperf.distributed.rank_wait`), what that waiting explains on top of the
    tolerance, ``(1 + tolerance) / (1 - w)``."""
    wait = number_or_none(extra.get("rank_wait_share"))
    if wait is None:
        return CONTENTION_LIMIT
    return (1.0 + tolerance) / (1.0 - min(max(wait, 0.0), MAX_RANK_WAIT))


#: The timing rules in the order they are asked; the first that doubts decides the reason.
TIMING_RULES: tuple[Rule, ...] = (clock_rule, spread_rule, conditions_rule)


def timing_reason(
    verdict: Verdict, entry: dict[str, Any] | None, node_id: str = "", clock_decided: bool = False
) -> Doubt | None:
    """Why a time/throughput verdict cannot be trusted: ``(doubt, reason with what would fix it)``, or None.

    ``clock_decided``: the verdict was decided by cycles per step because the SM clock moved (the clock rule).
    """
    metric = verdict.metric
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT) or verdict.status not in JUDGED:
        return None
    evidence = Evidence(verdict, entry, node_id, clock_decided)
    for rule in TIMING_RULES:
        doubt = rule(evidence)
        if doubt:
            return doubt
    return None


def first_clause(reason: str) -> str:
    """The part of a reason that reads on its own (up to the first ``"; "``): what the verdict column shows.

    A ``"; "`` inside parentheses does not end the clause's text on its own: the clause then ends before the
    parenthesis it would leave open, so what is shown (often inside parentheses itself) stays balanced.
    """
    head = reason.split("; ", 1)[0]
    opened: list[int] = []
    for index, char in enumerate(head):
        if char == "(":
            opened.append(index)
        elif char == ")" and opened:
            opened.pop()
    return head[: opened[0]].rstrip(" ,:") if opened else head


def conditions_reason(extra: dict[str, Any]) -> str | None:
    """An unsettled warm-up or a contended run (the timing loop's flags), or None."""
    if extra.get("settled") is False:
        calls, seconds = extra.get("warmup_calls", "?"), number_or_none(extra.get("warmup_seconds"))
        took = f"{calls} calls in {seconds:.2g} s" if seconds is not None else f"{calls} calls"
        return (
            f"the step never settled during warm-up ({took}: its times still trended), so its transient is not "
            "judged; give it a longer budget (max_time) or make its first calls cheaper"
        )
    if extra.get("contended") and number_or_none(extra.get("rank_wait_share")) is not None:
        waited = float(extra["rank_wait_share"])
        return (
            f"the script's ranks waited for a CPU {waited:.0%} of their time, and it times itself by the wall "
            f"clock; {QUIETER}"
        )
    if extra.get("contended"):
        share = number_or_none(extra.get("contended_fraction")) or 0.0
        pressure = number_or_none(extra.get("cpu_pressure_avg10"))
        load = f"; CPU pressure {pressure:.0f}%" if pressure is not None else ""
        who = "the step's threads" if extra.get("wait_scope") == "process" else "the measuring thread"
        return f"{share:.0%} of the samples were taken while {who} waited for a CPU{load}; {QUIETER}"
    return None


def machine_reason(
    extra: dict[str, Any], entry: dict[str, Any] | None, clock_decided: bool = False, tolerance: float | None = None
) -> str | None:
    """A machine state the evidence cannot judge across (the host CPU's calibration, NVML readings), or None.

    A host CPU whose calibration differs from the baseline's is another machine (or another speed state of it):
    :func:`pytest_gpuperf.judging.machine_rule.machine_change`.
    A moved SM clock alone is not such a state when the step's cycles decided (``clock_decided``), nor for a
    memory-bound step (its time follows the memory clock); a moved memory clock is, for a memory-bound step,
    and so is a GPU throttled by heat, a hardware slowdown or a power brake.
    """
    from pytest_gpuperf.judging.machine_rule import machine_change

    calibrated = machine_change(extra, entry, tolerance)
    if calibrated:
        return calibrated
    if extra.get("throttled"):
        return (
            f"the GPU was throttled while measuring (clock events: {extra.get('clock_events') or '?'}); "
            "let it cool down or check its power limit"
        )
    memory_bound = not follows_sm_clock(extra.get("bound"))
    if memory_bound:
        run_mem, base_mem = (
            number_or_none(extra.get("mem_clock_mhz")),
            number_or_none((entry or {}).get("mem_clock_mhz")),
        )
        if run_mem and base_mem and abs(run_mem / base_mem - 1.0) > MEM_CLOCK_CHANGE:
            return (
                f"the GPU's memory clock was {run_mem:.0f} MHz here but {base_mem:.0f} MHz when the baseline was "
                "recorded, and this memory-bound step's time follows it: re-record on this runner"
            )
        return None
    run_clock, base_clock = number_or_none(extra.get("sm_clock_mhz")), number_or_none((entry or {}).get("sm_clock_mhz"))
    if not clock_decided and run_clock and base_clock and abs(run_clock / base_clock - 1.0) > CLOCK_CHANGE:
        return (
            f"the GPU's SM clock was {run_clock:.0f} MHz here but {base_clock:.0f} MHz when the baseline was recorded, "
            "and the baseline stores no cycles per step to judge the work by: re-record it with this version "
            "(`pytest --gpuperf --gpuperf-update <test>`)"
        )
    return None


def disagreement_reason(
    first: Verdict, confirmation: Verdict, where: str = "a fresh process", node_id: str = ""
) -> str:
    """The reason for an inconclusive verdict whose confirmation did not repeat the first measurement's finding."""
    from pytest_gpuperf.commands import update_command

    change = format_change(confirmation.ratio) if isinstance(confirmation.ratio, (int, float)) else "?"
    record = (
        f"record it from more processes with: {update_command([node_id], processes=5)}"
        if node_id
        else ("record it from more processes (--gpuperf-update -o gpuperf_processes=5)")
    )
    return (
        f"its confirmation in {where} measured {change} ({confirmation.status}), so the process's own speed varies "
        f"more than the {first.tolerance or 0:.0%} tolerance; raise time_tolerance, {record}, or {QUIETER}"
    )


def bound_reason(verdict: Verdict, entries: dict[str, dict[str, Any]], intensity: Any) -> str | None:
    """Why a changed bound class is only a speed effect (same FLOPs per byte as the baseline), or None."""
    metric = verdict.metric
    if metric.kind != KIND_CATEGORY or verdict.status != "changed" or not metric.name.endswith(".bound"):
        return None
    step = metric.name.rpartition(".")[0]
    base = number_or_none((entries.get(f"{step}.arithmetic_intensity") or {}).get("value"))
    now = number_or_none(intensity)
    if base is None or now is None or base <= 0:
        return None
    if abs(now / base - 1.0) > SAME_INTENSITY:
        return None
    return (
        f"the class changed ({verdict.baseline} -> {metric.value}) while the step's FLOPs per byte stayed "
        f"{now:.3g}: only its speed moved, which the time verdict judges; {QUIETER} if it recurs"
    )


def inconclusive(verdict: Verdict, reason: str, doubt: str = CONFIRMATION) -> Verdict:
    """``verdict`` turned inconclusive: same numbers (the ones measured and judged), the reason in its message.

    A verdict that was inconclusive already (a doubtful first run whose confirmation then disagreed) says both
    reasons once: the deciding one, then the first run's in a clause.
    """
    shown = verdict.message or verdict.metric.label()
    if verdict.status == "inconclusive" and verdict.reason:
        shown = shown.removesuffix(f": inconclusive, {verdict.reason}")
        if verdict.reason != reason:
            reason = f"{reason}; the first run was doubtful too ({first_clause(verdict.reason)})"
    return Verdict(
        verdict.metric,
        "inconclusive",
        baseline=verdict.baseline,
        ratio=verdict.ratio,
        ci=verdict.ci,
        tolerance=verdict.tolerance,
        message=f"{shown}: inconclusive, {reason}",
        suspected=verdict.suspected or verdict.status,
        doubt=doubt,
        reason=reason,
    )
