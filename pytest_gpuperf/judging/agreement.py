"""Two processes that agree decide: a slowdown that the first measurement and its confirmation in a fresh process
both read past the tolerance fails, even where neither reading alone decided it.

Each measurement reads the change of the step's work as an interval (:func:`reading`): the bootstrap 95% interval
of its time or throughput, or, when the SM clock moved, the work's change at both ends of the clock band with each
end's own interval (:mod:`.clock_rule`), and a point inside it (the time's change; the middle of the band). The
step's work changed by one amount, so up to each process's own speed it lies in both intervals, and the two read it
together in their intersection. They **agree past the tolerance** (:func:`agreement`) when

* each one's point is past the tolerance;
* together they exclude it: the intersection's lower end is past the tolerance (intervals apart by no more than
  the recorded spread read the change between them; further apart, the processes contradict each other);
* the baseline's spread between processes, recorded from at least :data:`MIN_PROCESSES` processes, is at most
  :data:`SPREAD_SHARE` of the tolerance.

The last condition is what makes two processes evidence, and what keeps unchanged code from failing. A fresh
process's own speed (its memory layout, its allocator, the GPU's state when it started) moves its reading by about
the spread the recording's processes showed; unchanged code fails this rule only when two independent processes
both read it past the tolerance, more than twice that spread each, in the same direction. Where the spread is
closer to the tolerance, or unknown (fewer processes), two readings past it are left inconclusive with what would
decide them, never the advice to raise the tolerance they both exceeded. On a host CPU whole processes land in
fast or slow states several-fold apart; a recording whose processes all landed in one state shows a narrow spread,
and two later processes in the other state agree with each other. Each of those reads far past the tolerance with
a tight interval, so the plain confirmation (both regressions) already decides such a pair, as before; this rule
adds only pairs in which one reading's interval straddled, which it decides only on a spread far below the
tolerance, and never from a first run in another speed state of the host (its reading is not evidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from pytest_gpuperf.judging.clock_facts import CLOCK
from pytest_gpuperf.judging.ratio_rule import worse_ratio
from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Verdict
from pytest_gpuperf.units import format_change
from pytest_gpuperf.validate import number_or_none

#: Where an in-process confirmation measured (said in the reconciled verdict): the same process, so its agreement
#: says nothing about the process's own speed, and this rule does not apply to it.
IN_PROCESS = "a second measurement in this process"
#: Most the baseline's recorded spread between processes may be, as a share of the tolerance, for two fresh
#: processes that agree past the tolerance to decide (module doc).
SPREAD_SHARE = 0.5
#: Fewest processes a baseline's spread must come from to say how far one process's own speed moves.
MIN_PROCESSES = 3
#: Doubts of a first measurement whose reading still counts: its run's conditions (an unsettled or contended run,
#: with a clean confirmation beside it) and the clock band. A first run in another speed state of the host
#: (``state``) or on another machine reads another machine, not the change.
AGREEABLE = ("conditions", CLOCK)


@dataclass(frozen=True)
class Reading:
    """One measurement's change of the step's work, oriented so that > 1 is slower: a point and its interval."""

    point: float
    low: float
    high: float
    #: How it reads in a message, in the metric's own direction: ``+8.8% (95% CI +7.4..+9.3%)``.
    words: str


def _span(low: float, high: float, better: str) -> str:
    """``+5.8%..+7.4%``: an interval of worse-oriented ratios, shown in the metric's own direction."""
    ends = sorted(worse_ratio(v, better) for v in (low, high))  # the orientation is its own inverse
    return f"{format_change(ends[0])}..{format_change(ends[1])}"


def reading(verdict: Verdict) -> Reading | None:
    """The change a time/throughput ``verdict`` read (module doc), or None when it read no number."""
    metric = verdict.metric
    better = metric.better
    ratio = number_or_none(verdict.ratio)
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT) or ratio is None or ratio <= 0:
        return None
    interval = metric.extra.get("work_interval")
    if metric.extra.get("judged_on") and isinstance(interval, list) and len(interval) == 2:
        ends = sorted(worse_ratio(float(v), better) for v in interval)
        band = metric.extra.get("work_change")
        points = [worse_ratio(float(v), better) for v in band] if isinstance(band, list) and len(band) == 2 else []
        if not points:  # time and cycles: the work changed by between the two
            cycles = number_or_none(metric.extra.get("cycles_change")) or ratio
            points = [worse_ratio(ratio, better), cycles]
        middle = math.sqrt(min(points) * max(points))
        words = f"work {_span(min(points), max(points), better)} over the clock band"
        return Reading(middle, ends[0], ends[1], words)
    worse = worse_ratio(ratio, better)
    low, high = sorted(worse_ratio(float(v), better) for v in (verdict.ci or (ratio, ratio)))
    ci = f" (95% CI {_span(low, high, better)})" if verdict.ci else ""
    return Reading(worse, min(low, worse), max(high, worse), f"{format_change(ratio)}{ci}")


@dataclass(frozen=True)
class Agreement:
    """Two readings that both put the change past the tolerance: whether they decide, and how they read."""

    decided: bool
    first: Reading
    again: Reading
    #: The change the two read together (worse-oriented): the intersection of their intervals.
    low: float
    high: float
    #: When not decided: what kept it open (the spread, or the readings together straddling the tolerance).
    why: str = ""


def together(first: Reading, again: Reading, spread: float) -> tuple[float, float] | None:
    """What two readings of one change say together (worse-oriented), or None when they contradict each other.

    Overlapping, the change lies in their intersection. Apart by no more than ``spread`` (the baseline's spread
    between processes: one process read a little high, the other a little low), it lies between them: from the
    lower reading's high end to the higher reading's low end. Further apart, the two processes differ by more
    than a process's own speed moves, and neither says what the change is.
    """
    low, high = max(first.low, again.low), min(first.high, again.high)
    if low <= high:
        return low, high
    if low / high - 1.0 <= spread:
        return high, low
    return None


def agreement(first: Verdict, again: Verdict, entry: dict[str, Any] | None) -> Agreement | None:
    """Whether the first measurement and its fresh-process confirmation agree past the tolerance (module doc).

    None when they do not both read past it (they disagree: the caller's rule); otherwise an :class:`Agreement`,
    decided or not.
    """
    one, two = reading(first), reading(again)
    tolerance, better = first.tolerance or 0.0, first.metric.better
    if one is None or two is None or min(one.point, two.point) <= 1.0 + tolerance:
        return None
    spread = number_or_none((entry or {}).get("process_spread"))
    processes = number_or_none((entry or {}).get("processes")) or 1
    both = together(one, two, spread or 0.0)
    low, high = both or (min(one.low, two.low), max(one.high, two.high))
    why = ""
    if spread is None or processes < MIN_PROCESSES:
        why = f"the baseline was recorded from {processes:.0f} process(es), so how far a process's own speed moves "
        why += "is not known"
    elif spread > SPREAD_SHARE * tolerance:
        why = (
            f"the baseline's processes spread {spread:.1%} (from {processes:.0f}), more than "
            f"{SPREAD_SHARE:.0%} of the tolerance, so two processes are not enough"
        )
    elif both is None:
        why = f"the two lie further apart than the baseline's processes spread ({spread:.1%})"
    elif low <= 1.0 + tolerance:
        why = f"together they read {_span(low, high, better)}, which straddles the tolerance"
    return Agreement(not why, one, two, low, high, why)


def agreed(
    first: Verdict, again: Verdict, entry: dict[str, Any] | None, where: str, node_id: str = ""
) -> Verdict | None:
    """The verdict when a first measurement and its confirmation in ``where`` both read past the tolerance: a
    regression when they decide (:func:`agreement`), else inconclusive saying what would decide; None when the rule
    does not apply (an in-process confirmation, a first run in another speed state, a doubtful confirmation) or
    the two disagree."""
    from pytest_gpuperf.judging.evidence import CONFIRMATION, conditions_reason, inconclusive

    if where == IN_PROCESS or (first.status == "inconclusive" and first.doubt not in AGREEABLE):
        return None
    if conditions_reason(again.metric.extra):
        return None  # the confirmation's own run was doubtful: it cannot vouch for the first
    found = agreement(first, again, entry)
    if found is None:
        return None
    tolerance, better = first.tolerance or 0.0, first.metric.better
    both = f"the first process read {found.first.words} and {where} {found.again.words}"
    head = first.message.split(": inconclusive, ", 1)[0]  # a doubtful first run's own numbers
    if found.decided:
        spread = number_or_none((entry or {}).get("process_spread")) or 0.0
        message = (
            f"{head}; {both}: the two processes agree past the {tolerance:.0%} tolerance (together "
            f"{_span(found.low, found.high, better)}; the baseline's processes spread {spread:.1%})"
        )
        return replace(first, status="regression", suspected="", doubt="", reason="", message=message)
    from pytest_gpuperf.commands import update_command

    record = update_command([node_id], processes=5) if node_id else "--gpuperf-update -o gpuperf_processes=5"
    reason = (
        f"{both}, both past the {tolerance:.0%} tolerance, but {found.why}; record the baseline from more "
        f"processes with: {record}, lock the GPU's clocks on this runner, or compare with --gpuperf-ab"
    )
    return inconclusive(replace(first, message=head, reason=""), reason, CONFIRMATION)


def apart(first: Verdict, again: Verdict, where: str, node_id: str = "") -> Verdict:
    """The verdict when a first measurement and its confirmation in ``where`` do not agree past the tolerance:
    inconclusive, saying which of them could not decide.

    A first reading whose clock band straddled stays as it was, the confirmation's reading beside it; a
    confirmation whose own band straddled says so and what would decide it (the clock, not the tolerance); a
    confirmation that read the change within the tolerance disagrees
    (:func:`~pytest_gpuperf.judging.evidence.disagreement_reason`).
    """
    from pytest_gpuperf.judging.evidence import CONFIRMATION, disagreement_reason, first_clause, inconclusive

    read = reading(again)
    words = read.words if read else format_change(again.ratio) if isinstance(again.ratio, (int, float)) else "?"
    if first.doubt == CLOCK:  # one more reading alone does not decide a straddle
        return replace(first, message=f"{first.message}; {where} read {words} ({again.status})")
    if again.doubt == CLOCK:
        reason = (
            f"its confirmation in {where} read {words}, and {first_clause(again.reason)}; lock the GPU's clocks on "
            "this runner or compare with --gpuperf-ab"
        )
        return inconclusive(first, reason, CONFIRMATION)
    return inconclusive(first, disagreement_reason(first, again, where, node_id), CONFIRMATION)
