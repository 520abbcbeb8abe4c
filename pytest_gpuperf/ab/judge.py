"""Three-outcome judgement of one metric from the per-process results of both sides.

Each worker process reports one value per metric (the judged quantile of its samples). A
whole process can be fast or slow on a shared machine, and noise only ever slows a process
down, so each side is represented by its best process, and the evidence is trusted only when
another process of the same side comes close to it (the *spread*, second best against best).
With ``R`` the best-B/best-A ratio oriented so that > 1 is worse, ``u`` the larger of both
sides' spreads and of the best processes' own quantile precision, and ``t`` the tolerance:

* regression: ``R > (1 + t)(1 + u)`` and at least half of the paired ratios (A and B of the same
  round pair) are past ``1 + t`` too, from at least :data:`CONFIRMING_PAIRS` pairs unless no more can be run
  (whole processes can be slow: a regression seen in two is confirmed by a third);
* passed: ``R (1 + u) < 1 + t``; an improvement when ``R (1 + u) < 1 / (1 + t/2)``;
* otherwise undecided: more rounds, and inconclusive when none are left.

The orientation, the ratio-vs-tolerance rule of single ratios (pairs, counts) and the memory slack are the stored
baselines' (:mod:`pytest_gpuperf.judging.ratio_rule`); the best process per side and its spread are A/B's own.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.judging.ratio_rule import point_status, value_ratio, within_memory_slack, worse_ratio
from pytest_gpuperf.results import FAILING_STATUSES, RATIO_KINDS, worst_status
from pytest_gpuperf.stats import judged_quantile, median, quantile_precision


@dataclass
class SideSample:
    """One process's result for one metric."""

    value: float | str
    samples: list[float] = field(default_factory=list)
    status: str = ""


#: The keys of :meth:`AbVerdict.as_dict`, in the order the reports show them.
AS_DICT_KEYS = (
    *("metric", "label", "unit", "better", "kind", "status", "a", "b"),
    *("a_values", "b_values", "ratio", "pairs", "tolerance", "uncertainty", "message"),
)


@dataclass
class AbVerdict:
    """The A/B judgement of one metric (``decided`` False: more rounds could still decide it)."""

    metric: str
    label: str
    unit: str
    better: str
    kind: str
    status: str
    a_values: list[float | str]
    b_values: list[float | str]
    a: float | str | None = None
    b: float | str | None = None
    worse: float | None = None
    pairs: list[float] = field(default_factory=list)  # B / A of each round pair's processes
    tolerance: float | None = None
    uncertainty: float | None = None
    message: str = ""
    decided: bool = True
    judged: bool = True  # False: informational on B (recorded and shown, never failing)

    @property
    def ratio(self) -> float | None:
        """B / A of the shown values (not oriented), None for categories."""
        if isinstance(self.a, (int, float)) and isinstance(self.b, (int, float)) and self.a:
            return float(self.b) / float(self.a)
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form for reports."""
        values = {key: getattr(self, key) for key in AS_DICT_KEYS}
        return {key: list(value) if isinstance(value, list) else value for key, value in values.items()}


#: Round pairs a timing regression needs before more processes could still be asked for (a memory one needs none).
CONFIRMING_PAIRS = 3

Judged = tuple[str, float, float, list[float], str]


def _spread(costs: list[float]) -> float:
    ordered = sorted(costs)
    if len(ordered) < 2 or ordered[0] <= 0:
        return math.inf
    return ordered[1] / ordered[0] - 1.0


def _precision(side: list[SideSample], better: str, best_index: int) -> float:
    samples = side[best_index].samples
    if len(samples) < 3:
        return 0.0
    return quantile_precision(samples, judged_quantile(better))


def _undecided_why(uncertainty: float, tolerance: float) -> str:
    """Why the best processes could not decide: too few processes, or a spread too wide for the tolerance."""
    if math.isinf(uncertainty):
        return "one process per side cannot show its spread"
    if uncertainty >= tolerance:
        return (
            f"this test's spread between processes is {uncertainty:.0%} here; a {tolerance:.0%} tolerance cannot be "
            "judged on this machine: raise the tolerance, run more processes (gpuperf_ab_max_processes) or run "
            "on a quieter runner"
        )
    return (
        f"the change is within the noise of the tolerance (spread {uncertainty:.1%}); more processes "
        "(gpuperf_ab_max_processes) could decide it"
    )


def judge_numeric(
    a_side: list[SideSample],
    b_side: list[SideSample],
    pairs: list[tuple[int, int]],
    better: str,
    tolerance: float,
    kind: str,
    final: bool,
) -> Judged:
    """(status, worse ratio R, uncertainty u, paired ratios oriented like R, message) for a numeric metric."""
    if any(float(s.value) == 0.0 for s in [*a_side, *b_side]):
        return _judge_counts(a_side, b_side, better, tolerance, kind)
    a_costs = [worse_ratio(float(s.value), better) for s in a_side]
    b_costs = [worse_ratio(float(s.value), better) for s in b_side]
    best_a = min(range(len(a_costs)), key=a_costs.__getitem__)
    best_b = min(range(len(b_costs)), key=b_costs.__getitem__)
    worse = b_costs[best_b] / a_costs[best_a] if a_costs[best_a] > 0 else math.inf
    paired = [b_costs[j] / a_costs[i] for i, j in pairs if a_costs[i] > 0]
    if kind == "memory":
        uncertainty = max(_spread(a_costs), _spread(b_costs)) if len(a_costs) > 1 and len(b_costs) > 1 else 0.0
    else:
        within = math.hypot(_precision(a_side, better, best_a), _precision(b_side, better, best_b))
        uncertainty = max(_spread(a_costs), _spread(b_costs), within)
    limit = 1.0 + tolerance
    past = sum(1 for p in paired if point_status(p, "lower", tolerance) == "regression")
    beyond_slack = not within_memory_slack(kind, float(b_side[best_b].value), float(a_side[best_a].value))
    if worse > limit * (1.0 + uncertainty) and 2 * past >= len(paired) and beyond_slack:
        if kind != "memory" and len(paired) < CONFIRMING_PAIRS and not final:
            return "undecided", worse, uncertainty, paired, "B looks worse than A: one more pair confirms it"
        return "regression", worse, uncertainty, paired, "B is worse than A past the tolerance and the noise"
    if worse * (1.0 + uncertainty) < limit or not beyond_slack:
        if worse * (1.0 + uncertainty) < 1.0 / (1.0 + tolerance / 2.0):
            return "improvement", worse, uncertainty, paired, "B is better than A beyond the noise"
        return "unchanged", worse, uncertainty, paired, "within tolerance"
    status = "inconclusive" if final else "undecided"
    return status, worse, uncertainty, paired, _undecided_why(uncertainty, tolerance)


def _judge_counts(
    a_side: list[SideSample], b_side: list[SideSample], better: str, tolerance: float, kind: str
) -> Judged:
    """A metric that reads 0 somewhere (host syncs per step, a count): the sides' medians compared as they are.

    Ratios of zeros say nothing (0 / 0), and a count is exact, not noisy: the same median on both sides is
    unchanged, B's median against A's judged like a point value against its baseline (from 0: by its direction).
    """
    a_mid, b_mid = median([float(s.value) for s in a_side]), median([float(s.value) for s in b_side])
    if a_mid == b_mid or within_memory_slack(kind, b_mid, a_mid):
        return "unchanged", 1.0, 0.0, [], f"same on both sides ({a_mid:g})"
    ratio = value_ratio(b_mid, a_mid)
    status = point_status(ratio, better, tolerance)
    worse = 1.0 if status == "unchanged" else worse_ratio(ratio, better)
    return status, worse, 0.0, [], f"A {a_mid:g}, B {b_mid:g} (medians of the processes)"


def _most_common(values: list[float | str]) -> float | str:
    return Counter(values).most_common(1)[0][0]


def one_sided(name: str, info: dict[str, Any], a_side: list[SideSample], b_side: list[SideSample]) -> AbVerdict:
    """A metric measured on one side only: shown, never judged against the other side."""
    only = "B (the working tree)" if b_side else "A (REF)"
    side = b_side or a_side
    verdict = _blank(name, info, a_side, b_side)
    verdict.message, verdict.tolerance = f"only measured on {only}", None
    verdict.b = side[-1].value if b_side else None
    verdict.judged = any(s.status != "info" for s in side)
    verdict.a = side[-1].value if a_side else None
    return verdict


def _blank(name: str, info: dict[str, Any], a_side: list[SideSample], b_side: list[SideSample]) -> AbVerdict:
    """An informational verdict of ``name`` from B's verdict dict ``info`` (unit, better, kind, tolerance)."""
    unit, better, kind = str(info.get("unit", "")), str(info.get("better", "lower")), str(info.get("kind", "custom"))
    a_values, b_values = [s.value for s in a_side], [s.value for s in b_side]
    verdict = AbVerdict(name, str(info.get("label", name)), unit, better, kind, "info", a_values, b_values)
    tolerance = info.get("tolerance")
    verdict.tolerance = float(tolerance) if isinstance(tolerance, (int, float)) else None
    return verdict


def _on_ratio(
    verdict: AbVerdict, a_side: list[SideSample], b_side: list[SideSample], pairs: list[tuple[int, int]], final: bool
) -> None:
    """Judge a time, throughput, memory or custom number by the best processes and the round pairs."""
    better, tolerance = verdict.better, float(verdict.tolerance or 0.0)
    status, worse, uncertainty, paired, message = judge_numeric(
        a_side, b_side, pairs, better, tolerance, verdict.kind, final
    )
    pick = min if better == "lower" else max
    verdict.a, verdict.b = pick(float(s.value) for s in a_side), pick(float(s.value) for s in b_side)
    verdict.worse, verdict.uncertainty = worse, uncertainty
    verdict.pairs = [worse_ratio(p, better) for p in paired if p > 0]  # B / A, like ``ratio``
    verdict.status, verdict.message = ("info", message) if not verdict.judged else (status, message)
    verdict.decided = status != "undecided"


def _stored_gate(verdict: AbVerdict, stored: list[str]) -> None:
    """Stored baselines keep gating memory, categories (the bound) and custom metrics: B's own verdicts."""
    gating = [s for s in stored if s in FAILING_STATUSES]
    if gating and len(gating) == len(stored):
        verdict.status = worst_status([verdict.status, gating[0]])
        verdict.message += f"; against the stored baseline: {gating[0]}"
    elif gating:
        verdict.status = worst_status([verdict.status, "inconclusive"])
        verdict.message += f"; against the stored baseline {len(gating)} of {len(stored)} B processes disagree"


def judge_metric(
    name: str,
    a_side: list[SideSample],
    b_side: list[SideSample],
    pairs: list[tuple[int, int]],
    info: dict[str, Any],
    final: bool,
) -> AbVerdict:
    """Judge one metric present on both sides; ``info`` is B's verdict dict (unit, better, kind, tolerance)."""
    verdict = _blank(name, info, a_side, b_side)
    stored = [s.status for s in b_side]
    verdict.judged = not all(s == "info" for s in stored)
    numeric = all(isinstance(s.value, (int, float)) for s in [*a_side, *b_side])
    ratio_judged = verdict.kind in RATIO_KINDS and verdict.better in ("lower", "higher")
    if ratio_judged and numeric and verdict.tolerance is not None:
        _on_ratio(verdict, a_side, b_side, pairs, final)
    elif numeric:
        verdict.a = median([float(v) for v in verdict.a_values])
        verdict.b = median([float(v) for v in verdict.b_values])
        verdict.message = "recorded, not judged (median of the processes)"
    else:
        verdict.a, verdict.b = _most_common(verdict.a_values), _most_common(verdict.b_values)
        verdict.message = "same on both sides" if verdict.a == verdict.b else f"A {verdict.a}, B {verdict.b}"
        if len(set(stored)) == 1 and stored[0] in ("unchanged", "changed"):
            verdict.status = stored[0]  # judged against the stored baseline in the B processes
    if verdict.kind not in ("time", "throughput") and verdict.judged:
        _stored_gate(verdict, stored)
    return verdict
