"""A/B on a GPU whose SM clock moves between processes: time decides unless the two sides' clocks differ.

Every A/B worker is a fresh process, and a power-capped GPU runs each at its own SM clock. A and B alternate, so
that spread is process noise that both sides share, and the A/B judge already weighs it (the spread between a
side's processes, the paired ratios): time decides, and where the best processes cannot decide, the round pairs
may (:func:`decide_on_pairs`). Cycles per step would over-correct there (a step's time follows the SM clock only
partly). Only when the two sides' median clocks differ (:func:`~pytest_gpuperf.judging.clock_rule.clocks_differ`:
the sides ran in different GPU states) are the stored baselines' clock rules applied to the round pairs: each pair's
B/A weighed by its two workers' clocks over the exponent band the workers' own samples allow
(:func:`decide_on_band`), and without any fit, time and cycles per step bracketed
(:func:`~pytest_gpuperf.judging.clock_rule.bracket`). A memory-bound step keeps its time verdict.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_gpuperf.ab.judge import AbVerdict, SideSample, judge_numeric
from pytest_gpuperf.judging.clock_facts import follows_sm_clock
from pytest_gpuperf.judging.clock_rule import (
    AGREED,
    End,
    across_band,
    at_exponent,
    band_of,
    band_words,
    bracket,
    clocks_differ,
)
from pytest_gpuperf.judging.ratio_rule import point_status, worse_ratio
from pytest_gpuperf.stats import median
from pytest_gpuperf.units import format_change

Metrics = list[dict[str, dict[str, Any]]]


def pairs_of(name: str, a_metrics: Metrics, b_metrics: Metrics) -> list[tuple[int, int]]:
    """(A index, B index) of the round pairs where both processes reported ``name``, in side-sample positions."""
    a_pos = {i: k for k, i in enumerate(i for i, m in enumerate(a_metrics) if name in m)}
    b_pos = {i: k for k, i in enumerate(i for i, m in enumerate(b_metrics) if name in m)}
    return [(a_pos[i], b_pos[i]) for i in range(min(len(a_metrics), len(b_metrics))) if i in a_pos and i in b_pos]


def _clocks(name: str, metrics: Metrics) -> list[float]:
    out = []
    for m in metrics:
        clock = ((m.get(name) or {}).get("extra") or {}).get("sm_clock_mhz")
        if isinstance(clock, (int, float)) and clock > 0:
            out.append(float(clock))
    return out


def _bound(step: str, metrics: Metrics) -> Any:
    return next(((m.get(f"{step}.bound") or {}).get("value") for m in reversed(metrics) if f"{step}.bound" in m), None)


def sides_clocks_differ(a_clocks: list[float], b_clocks: list[float]) -> bool:
    """True when the two sides' median SM clocks differ (not just their processes)."""
    return bool(a_clocks and b_clocks) and clocks_differ(median(b_clocks), median(a_clocks))


#: Pairs needed before the paired rule may decide, and the share of them that must agree with the median.
MIN_PAIRS, AGREEING_SHARE = 3, 0.75


def _worse(verdict: AbVerdict) -> list[float]:
    """Each round pair's B/A oriented so that > 1 is worse."""
    return [worse_ratio(p, verdict.better) for p in verdict.pairs if p > 0]


def decide_on_pairs(verdict: AbVerdict) -> str | None:
    """The paired rule for a GPU whose processes ran at their own clocks alike on both sides, or None.

    The best-process rule of :func:`~pytest_gpuperf.ab.judge.judge_numeric` assumes noise only slows a process
    down; under a power cap one worker can boost, and that best process alone decides R. A and B of one round pair
    ran back to back in the same GPU state, so their ratio carries the change: the median of at least
    :data:`MIN_PAIRS` pair ratios decides when at least :data:`AGREEING_SHARE` of the pairs agree with it (past the
    tolerance for a regression, within it for a pass, better beyond it for an improvement).
    """
    return paired_status(_worse(verdict), verdict.tolerance)


def paired_status(worse: list[float], tolerance: float | None) -> str | None:
    """The paired rule on round-pair ratios oriented so that > 1 is worse: the outcome the median says when at
    least :data:`AGREEING_SHARE` of at least :data:`MIN_PAIRS` pairs agree with it, else None."""
    if tolerance is None or len(worse) < MIN_PAIRS:
        return None
    need = math.ceil(AGREEING_SHARE * len(worse))
    return next((status for status, says, agree, _ in _outcomes(worse, tolerance) if says and agree >= need), None)


def _outcomes(worse: list[float], tolerance: float) -> list[tuple[str, bool, int, str]]:
    """Each outcome of the paired rule: whether the pairs' median says it, how many pairs agree, in words.

    Each pair and the median are read by the ratio rule; the median says "unchanged" only within half the tolerance.
    """
    says = point_status(median(worse), "lower", tolerance)
    each = [point_status(w, "lower", tolerance) for w in worse]
    return [
        ("regression", says == "regression", each.count("regression"), "past the tolerance"),
        ("improvement", says == "improvement", each.count("improvement"), "better beyond it"),
        ("unchanged", median(worse) <= 1.0 + tolerance / 2.0, len(worse) - each.count("regression"), "within it"),
    ]


def pairs_message(verdict: AbVerdict, status: str) -> str:
    """What the paired rule saw: the pairs' median B/A and how many of them agree with ``status``."""
    worse, tolerance = _worse(verdict), verdict.tolerance or 0.0
    agree, said = next((agree, said) for name, _, agree, said in _outcomes(worse, tolerance) if name == status)
    return (
        f"round pairs B/A (worse > 1) median {format_change(median(worse))}, {agree} of {len(worse)} {said} "
        f"(tolerance {tolerance:.0%}); the best processes alone could not decide"
    )


def _extras(name: str, metrics: Metrics) -> list[dict[str, Any]]:
    """Each process's facts of ``name`` in side-sample positions (the processes that reported it)."""
    return [dict((m[name] or {}).get("extra") or {}) for m in metrics if name in m]


def _agreed(status: str) -> str:
    """What the two judged ends said together, in words."""
    return AGREED.get(status, "they straddle the tolerance" if status != "undecided" else "undecided yet")


def _settle(verdict: AbVerdict, status: str | None, final: bool) -> str:
    """Set ``status`` (None: inconclusive, or undecided while more rounds can run) and say what it was."""
    status = status or ("inconclusive" if final else "undecided")
    verdict.status, verdict.decided = status, status != "undecided"
    return _agreed(status)


def decide_on_band(verdict: AbVerdict, a_metrics: Metrics, b_metrics: Metrics, final: bool) -> bool:
    """Sides at different SM clocks: each round pair's B/A weighed by its two processes' clocks over the exponent
    band the workers' own samples allow (:func:`~pytest_gpuperf.judging.clock_rule.band_of`), judged by the paired
    rule at both ends of the band. False (nothing decided) when no worker could fit its exponent.
    """
    name = verdict.metric
    a_facts, b_facts = _extras(name, a_metrics), _extras(name, b_metrics)
    band = band_of([*a_facts, *b_facts])
    index = pairs_of(name, a_metrics, b_metrics)
    if band is None or len(index) != len(verdict.pairs):
        return False
    clock_ratios = []
    for i, j in index:
        fa, fb = a_facts[i].get("sm_clock_mhz"), b_facts[j].get("sm_clock_mhz")
        ok = isinstance(fa, (int, float)) and isinstance(fb, (int, float)) and fa > 0 and fb > 0
        clock_ratios.append(float(fb) / float(fa) if ok else 1.0)  # type: ignore[arg-type]

    def judge_at(a: float) -> End:  # B's work per A's: its time, with what its own clock did to it at this exponent
        weighed = [
            worse_ratio(at_exponent(p, r, a, verdict.better), verdict.better)
            for p, r in zip(verdict.pairs, clock_ratios, strict=True)
        ]
        return (median(weighed) if weighed else 1.0), paired_status(weighed, verdict.tolerance)

    changes, status = across_band(band, judge_at)
    exponents, changed = band_words(band, changes)
    what = _settle(verdict, status, final)
    verdict.message = (
        f"the sides ran at different SM clocks (median A {median(_clocks(name, a_metrics)):.0f}, "
        f"B {median(_clocks(name, b_metrics)):.0f} MHz): round pairs B/A (worse > 1) with each pair's clocks "
        f"weighed by {exponents} (fitted on the workers' own samples) median {changed}, "
        f"tolerance {verdict.tolerance or 0:.0%}: {what}"
    )
    return True


def _side(name: str, metrics: Metrics) -> list[SideSample]:
    return [SideSample(m[name]["value"], list(m[name].get("sample_values") or [])) for m in metrics if name in m]


def _on_cycles(verdict: AbVerdict, a_metrics: Metrics, b_metrics: Metrics, spread: str, final: bool) -> None:
    """Sides at different SM clocks and no exponent fit: time and cycles per step, bracketed."""
    cycles = f"{verdict.metric.rpartition('.')[0]}.cycles"
    a_side, b_side = _side(cycles, a_metrics), _side(cycles, b_metrics)
    if not a_side or not b_side or len(a_side) != len(verdict.a_values) or len(b_side) != len(verdict.b_values):
        return
    pairs = pairs_of(cycles, a_metrics, b_metrics)
    status, worse, _uncertainty, _paired, why = judge_numeric(
        a_side, b_side, pairs, "lower", verdict.tolerance or 0.0, "cycles", final
    )
    time_status = verdict.status
    combined: str | None
    if "undecided" in (time_status, status):
        combined = "undecided"
    elif "inconclusive" in (time_status, status):
        combined = "inconclusive"
    else:
        combined = bracket(time_status, status)
    what = _settle(verdict, combined, final)
    verdict.message = (
        f"the processes ran at {spread}: time B/A {format_change(verdict.worse or 1.0)} ({time_status}), "
        f"cycles per step (device time x SM clock) B/A {format_change(worse)} ({status}): {what}; {why}"
    )


def _alike(verdict: AbVerdict, clocks: list[float], a_clocks: list[float], b_clocks: list[float]) -> None:
    """Both sides' processes spread over the same clocks: time decides, or the round pairs where it could not."""
    by_pairs = decide_on_pairs(verdict) if verdict.status in ("undecided", "inconclusive") else None
    if by_pairs is not None:
        verdict.status, verdict.decided, verdict.message = by_pairs, True, pairs_message(verdict, by_pairs)
    verdict.message = (
        f"{verdict.message}; the processes ran at {min(clocks):.0f}-{max(clocks):.0f} MHz, both sides alike "
        f"(median A {median(a_clocks):.0f}, B {median(b_clocks):.0f} MHz): time decides"
    ).lstrip("; ")


def decide_by_clocks(verdicts: list[AbVerdict], a_metrics: Metrics, b_metrics: Metrics, final: bool) -> None:
    """Each time/throughput verdict of workers whose SM clocks spread: time (or the round pairs) decides while both
    sides ran alike, time and the step's cycles together where the sides' clocks differ."""
    for verdict in verdicts:
        if verdict.kind not in ("time", "throughput") or verdict.tolerance is None or verdict.status == "info":
            continue
        a_clocks, b_clocks = _clocks(verdict.metric, a_metrics), _clocks(verdict.metric, b_metrics)
        clocks = a_clocks + b_clocks
        if len(clocks) < 2 or not clocks_differ(max(clocks), min(clocks)):
            continue
        if not sides_clocks_differ(a_clocks, b_clocks):
            _alike(verdict, clocks, a_clocks, b_clocks)
        elif follows_sm_clock(_bound(verdict.metric.rpartition(".")[0], b_metrics)):
            if not decide_on_band(verdict, a_metrics, b_metrics, final):
                spread = f"{min(clocks):.0f}-{max(clocks):.0f} MHz"
                _on_cycles(verdict, a_metrics, b_metrics, spread, final)
