"""Which re-recorded entries ``--gpuperf-update`` writes and which it keeps byte for byte (the update policy).

A judged entry is rewritten only when its metric moved past its tolerance (judged the way a normal run judges it,
its spread rule included), when how it was measured changed, when it is new, when its spread between processes is
too wide to judge its tolerance, or when this recording measured more processes; a time/throughput entry that
measured slower past its tolerance is kept and listed unless slower is accepted. A step's timing family is kept or
rewritten together, decided by its judged member. :mod:`.update` holds the entries and writes what :func:`plan` decides.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.results import KIND_CATEGORY
from pytest_gpuperf.validate import number_or_none

if TYPE_CHECKING:
    from pytest_gpuperf.results import Metric, Verdict

#: Metrics computed from a step's time (so kept or rewritten with it), by the last part of their name.
TIMING_DERIVED = ("flop_rate", "bandwidth", "roof_share", "roof_fraction", "cycles", "host_overhead")
#: Fields that say how a metric was measured: a change rewrites the entry whatever the values.
IDENTITY_FIELDS = ("unit", "better", "kind", "method")
_TIMING_KINDS = ("time", "throughput")
#: Statuses of a re-recorded metric that moved past its tolerance of the stored entry.
MOVED = ("regression", "improvement", "changed")


def _judged(metric: Metric, old: dict[str, Any], where: str) -> Verdict:
    """``metric`` judged against its stored entry the way a normal run judges it (informational ones too)."""
    from pytest_gpuperf.judging.compare import judge

    tolerance = metric.tolerance if metric.tolerance is not None else 0.05
    return judge(dataclasses.replace(metric, judged=True), old, tolerance, where)


def _moved(metric: Metric, old: dict[str, Any], where: str) -> Verdict | None:
    """The judged verdict when ``metric`` stayed within its tolerance of ``old``; None when it moved."""
    verdict = _judged(metric, old, where)
    return None if verdict.status in MOVED else verdict


def _same_identity(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Measured the same way; an old entry without the calibration a new one carries is rewritten once."""
    return not _changed_fields(new, old)


def _changed_fields(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The identity fields that differ, and ``calibration`` when the new entry adds one (an older file's)."""
    changed = [key for key in IDENTITY_FIELDS if new.get(key) != old.get(key)]
    return changed + (["calibration"] if "calibration" in new and "calibration" not in old else [])


def _families(metrics: list[Metric]) -> dict[str, list[Metric]]:
    """Metrics grouped so that each group is kept or rewritten as one (timing families, else one metric each)."""
    names = {m.name for m in metrics}
    groups: dict[str, list[Metric]] = {}
    for metric in metrics:
        prefix, _, last = metric.name.rpartition(".")
        timed = f"{prefix}.time" in names and (metric.kind in _TIMING_KINDS or last in TIMING_DERIVED)
        groups.setdefault(f"{prefix}.time" if timed else metric.name, []).append(metric)
    return groups


def undecidable(metric: Metric, old: dict[str, Any]) -> str | None:
    """Why the stored timing entry cannot judge ``metric`` at its tolerance (its processes spread wider) and this
    recording replaces it, or None.

    The judge makes every change within that spread inconclusive (:mod:`pytest_gpuperf.judging.evidence`), so such
    an entry gates nothing. A re-record replaces it when its own processes agree within the tolerance **and** it
    measured more processes than the entry was recorded from (the command the warning suggests does). From as
    many processes, a narrow spread is a luckier draw of the same noise, not more evidence: replacing on it alone
    would rewrite the entry at every plain re-record of a machine whose processes fall into two speed groups.
    """
    spread, tolerance = number_or_none(old.get("process_spread")), metric.tolerance
    if metric.kind not in _TIMING_KINDS or spread is None or tolerance is None or spread <= tolerance:
        return None
    again = number_or_none(metric.extra.get("process_spread"))
    if again is not None and again > tolerance:
        # This recording's processes spread as wide: replacing one entry that gates nothing with another only
        # churns the file (a CPU step whose processes differ 7x by their buffers' 4 KiB aliasing did that each time).
        return None
    now, before = number_or_none(metric.extra.get("processes")) or 1.0, number_or_none(old.get("processes")) or 1.0
    if now <= before:
        return None
    return (
        f"its recorded spread between processes ({spread:.0%}) was wider than its {tolerance:.0%} tolerance; "
        f"recorded again from {now:.0f} processes (was {before:.0f})"
    )


def _fewer_processes(metric: Metric, old: dict[str, Any]) -> str | None:
    """The stored timing entry came from fewer processes than this recording measured (its spread is older evidence)."""
    now, before = number_or_none(metric.extra.get("processes")), number_or_none(old.get("processes")) or 1.0
    if metric.kind not in _TIMING_KINDS or now is None or now <= before:
        return None
    return f"recorded from {now:.0f} processes (was {before:.0f})"


def within_spread(verdict: Verdict, old: dict[str, Any]) -> str | None:
    """Why a timing entry's move past its tolerance is not evidence, or None when it is.

    The judge's own spread rule (:func:`pytest_gpuperf.judging.evidence.spread_rule`) with the wider of the two
    recordings' spreads between processes: when whole processes of either recording differ by more than the
    tolerance, a move inside that band is what re-recording unchanged code on that machine does, so the stored
    entry is kept; a time that moved past the band is written (or kept as looser).
    """
    from pytest_gpuperf.judging.evidence import Evidence, spread_rule

    metric = verdict.metric
    spreads = [number_or_none(old.get("process_spread")), number_or_none(metric.extra.get("process_spread"))]
    widest = max((s for s in spreads if s is not None), default=None)
    if metric.kind not in _TIMING_KINDS or widest is None:
        return None
    if spread_rule(Evidence(verdict, {**old, "process_spread": widest})) is None:
        return None
    change = f"{verdict.ratio - 1.0:+.1%}" if isinstance(verdict.ratio, (int, float)) else "its change"
    return f"{change} lies within the {widest:.0%} spread between the recordings' processes"


@dataclasses.dataclass
class Decision:
    """What an update does with one metric's entry, and why (shown in the summary)."""

    keep: bool
    #: moved, new, undecidable, processes, measured, informational, looser (kept: slower, not accepted), within,
    #: noise (kept: a move within the recordings' spread between processes), with_time (a class kept because its
    #: step's slower time was kept)
    why: str
    verdict: Verdict | None = None
    detail: str = ""


def _looser(verdict: Verdict) -> bool:
    """A time/throughput that measured slower past its tolerance: writing it would loosen the gate."""
    return verdict.metric.kind in _TIMING_KINDS and verdict.status == "regression"


def _judged_group(
    group: list[Metric], old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], where: str, accept_slower: bool
) -> dict[str, Decision]:
    """Decisions for one group that has a judged member (a step's timing family, a memory, a category ...)."""
    deciding = [m for m in group if m.kind in _TIMING_KINDS and m.judged] or [m for m in group if m.judged]
    decision: Decision | None = None
    # Only the deciding metrics' identity matters: an informational rate of the family whose form changed
    # (a roof share over 100% stored as the word "counting error") keeps its entry while the timing is kept.
    if any(m.name not in old for m in deciding):
        decision = Decision(False, "new")
    elif any(not _same_identity(new[m.name], old[m.name]) for m in deciding):
        changed = sorted({k for m in deciding for k in _changed_fields(new[m.name], old[m.name])})
        decision = Decision(False, "measured", detail=f"measured differently ({', '.join(changed)} changed)")
    else:
        for metric in deciding:
            why = undecidable(metric, old[metric.name]) or _fewer_processes(metric, old[metric.name])
            if why:
                kind = "undecidable" if why.startswith("its recorded spread") else "processes"
                decision = Decision(False, kind, _judged(metric, old[metric.name], where), why)
                break
    verdicts = {m.name: _judged(m, old[m.name], where) for m in deciding if m.name in old}
    if decision is None:
        moved = [v for v in verdicts.values() if v.status in MOVED]
        noise = [why for v in moved if (why := within_spread(v, old[v.metric.name]))]
        if moved and len(noise) == len(moved):
            decision = Decision(True, "noise", moved[0], noise[0])
        elif moved and any(_looser(v) for v in moved) and not accept_slower:
            decision = Decision(True, "looser", next(v for v in moved if _looser(v)))
        elif moved:
            decision = Decision(False, "moved", moved[0])
        else:
            decision = Decision(True, "within")
    out: dict[str, Decision] = {}
    for metric in group:
        if metric.name not in old:
            out[metric.name] = Decision(False, "new")
            continue
        out[metric.name] = dataclasses.replace(decision, verdict=verdicts.get(metric.name))
    return out


def _hold_classes_with_their_time(metrics: list[Metric], decisions: dict[str, Decision]) -> None:
    """A step's bound class is kept while its slower time is kept (not accepted): the class is read from that
    time, so writing the one without the other would store a class the stored time does not have."""
    held = {name.rpartition(".")[0] for name, d in decisions.items() if d.keep and d.why == "looser"}
    for metric in metrics:
        decision = decisions.get(metric.name)
        if metric.kind != KIND_CATEGORY or metric.name.rpartition(".")[0] not in held or decision is None:
            continue
        if not decision.keep and decision.why == "moved":
            decisions[metric.name] = Decision(True, "with_time", decision.verdict, "kept with its step's slower time")


def plan(
    metrics: list[Metric],
    old: dict[str, dict[str, Any]],
    new: dict[str, dict[str, Any]],
    where: str,
    accept_slower: bool = False,
) -> dict[str, Decision]:
    """What an update does with each metric of one test: keep its stored entry or write the new one, and why.

    * A judged entry is rewritten when it is new, measured differently, moved past its tolerance and past the
      spread between processes of either recording (:func:`within_spread`; a slower time/throughput only with
      ``accept_slower``: otherwise the looser entry is kept and listed), when its
      recorded spread between processes is too wide to judge its tolerance, or when this recording measured
      more processes than it was recorded from.
    * An informational entry (recorded, never judged) is written only when it is new or when a judged entry of
      the test is rewritten, so re-recording unchanged code never churns the file with numbers nobody gates.
    """
    decisions: dict[str, Decision] = {}
    informational: list[Metric] = []
    for group in _families(metrics).values():
        if any(m.judged for m in group):
            decisions.update(_judged_group(group, old, new, where, accept_slower))
        else:
            informational += group
    _hold_classes_with_their_time(metrics, decisions)
    rewritten = any(not d.keep for d in decisions.values())
    for metric in informational:
        if metric.name not in old:
            decisions[metric.name] = Decision(False, "new")
        elif rewritten:
            decisions[metric.name] = Decision(False, "informational")
        else:
            decisions[metric.name] = Decision(True, "informational")
    return decisions


def decide(
    metrics: list[Metric],
    old: dict[str, dict[str, Any]],
    new: dict[str, dict[str, Any]],
    where: str,
    accept_slower: bool = False,
) -> dict[str, Verdict]:
    """The metrics whose stored entry is kept, each with the verdict that kept it (judged against ``old``)."""
    from pytest_gpuperf.results import Verdict as VerdictType

    kept = {}
    for name, decision in plan(metrics, old, new, where, accept_slower).items():
        if decision.keep:
            metric = next(m for m in metrics if m.name == name)
            verdict = decision.verdict
            if verdict is None:
                verdict = VerdictType(metric, "unchanged", baseline=old[name].get("value"))
            kept[name] = verdict
    return kept


def change_line(node_id: str, name: str, old: dict[str, Any], new: dict[str, Any], detail: str = "") -> str:
    """``test::id step.time: 4.13 ms -> 6.62 ms (+60.3%)`` for the update summary."""
    from pytest_gpuperf.units import format_change, format_value

    unit = str(new.get("unit", old.get("unit", "")))
    before, after = old.get("value"), new.get("value")
    text = f"{node_id} {name}: {format_value(before, unit) if before is not None else '?'} -> "
    text += format_value(after, unit) if after is not None else "?"
    b, a = number_or_none(before), number_or_none(after)
    if b and a is not None:
        text += f" ({format_change(a / b)})"
    return f"{text}; {detail}" if detail else text
