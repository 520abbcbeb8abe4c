"""Verdicts in words and numbers a reader can check: the change, the limit that was applied, and why.

Works on the JSON-able verdict dicts carried on test reports (``report.gpuperf["verdicts"]``),
so the terminal, Markdown and failure messages all say the same thing. A change is always
shown as the metric's own change (``throughput -39.9%``) next to the limit *in the same
direction* that the judge applied (``-33.3%`` for a 50% slowdown tolerance on a throughput:
``1 / 1.5 - 1``), so ``-39.9% < -33.3%`` can be checked by eye. When something other than
the point change decided (the 64 KiB memory allowance, a confidence interval that includes
no change), the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pytest_gpuperf.results import MEMORY_SLACK_BYTES
from pytest_gpuperf.units import format_bytes, format_change, format_value

STATUS_WORDS = {
    "regression": "REGRESSION",
    "changed": "CHANGED",
    "improvement": "improved",
    "unchanged": "ok",
    "new": "no baseline",
    "recorded": "recorded",
    "info": "-",
    "inconclusive": "inconclusive",
}
#: Statuses a default-verbosity summary lists row by row (everything else is "ok").
NOT_OK = ("regression", "changed", "improvement", "new", "inconclusive")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def regression_limit(better: str, tolerance: float) -> float:
    """The change (``ratio - 1``) past which the metric regresses: ``+tol`` when lower is better,
    ``1 / (1 + tol) - 1`` when higher is better (the same slowdown factor)."""
    return tolerance if better != "higher" else 1.0 / (1.0 + tolerance) - 1.0


def format_limit(better: str, tolerance: float) -> str:
    """The regression limit as printed: ``+5.0%``, ``-33.3%`` or ``±5.0%``."""
    if better == "equal":
        return f"±{tolerance * 100:.1f}%"
    return format_change(1.0 + regression_limit(better, tolerance))


def ab_title(verdict: dict[str, Any]) -> str:
    """``A/B against REF (sha)`` for a verdict of an A/B comparison, else ``""``."""
    extra = verdict.get("extra")
    return str(extra.get("ab") or "") if isinstance(extra, dict) else ""


def slower_timing(verdicts: Iterable[dict[str, Any]]) -> bool:
    """True when a time/throughput among ``verdicts`` regressed: recording it needs ``--gpuperf-accept-slower``."""
    return any(v.get("status") == "regression" and v.get("kind") in ("time", "throughput") for v in verdicts)


def numeric(verdict: dict[str, Any]) -> bool:
    """True when the verdict compares two numbers with a ratio and a tolerance."""
    return (
        verdict.get("kind") != "category"
        and _number(verdict.get("ratio")) is not None
        and _number(verdict.get("tolerance")) is not None
        and verdict.get("ratio") != 0
    )


def change_text(verdict: dict[str, Any]) -> str:
    """``+27.6%`` (the metric's own change against its baseline), or ``""``.

    An informational metric (recorded, never judged: a step's time when its throughput is judged) shows its
    change too, so a reader sees a tripled time even though the throughput beside it decides.
    """
    if numeric(verdict):
        return format_change(float(verdict["ratio"]))
    if verdict.get("status") == "info" and verdict.get("kind") != "category":
        value, baseline = _number(verdict.get("value")), _number(verdict.get("baseline"))
        if value is not None and baseline is not None and baseline > 0:
            return format_change(value / baseline)
    return ""


def limit_text(verdict: dict[str, Any]) -> str:
    """The applied regression limit in the change's direction, or ``""``."""
    if not numeric(verdict):
        return ""
    return format_limit(str(verdict.get("better", "lower")), float(verdict["tolerance"]))


def _past_limit(verdict: dict[str, Any]) -> bool:
    ratio, tolerance = float(verdict["ratio"]), float(verdict["tolerance"])
    better = str(verdict.get("better", "lower"))
    if better == "equal":
        return abs(ratio - 1.0) > tolerance
    worse = ratio if better == "lower" else 1.0 / ratio
    return worse > 1.0 + tolerance


def _includes_no_change(ci: Any) -> bool:
    low, high = (_number(c) for c in ci) if ci and len(ci) == 2 else (None, None)
    return low is not None and high is not None and low <= 1.0 <= high


def why(verdict: dict[str, Any]) -> str:
    """What decided a verdict when the change and the limit alone would not tell (``""`` otherwise).

    An inconclusive verdict shows the reason of the rule that decided it (:mod:`pytest_gpuperf.judging.evidence`),
    never a confidence interval that did not decide it.
    """
    from pytest_gpuperf.judging.evidence import first_clause

    notes = []
    status = verdict.get("status")
    extra = verdict.get("extra") or {}
    if status == "regression" and extra.get("workload_change"):  # a slowdown that came with more counted work
        notes.append(f"a changed workload: {extra['workload_change']}")
    if status == "unchanged" and extra.get("within_spread"):  # a noisy metric's gain no process can tell apart
        notes.append(first_clause(str(extra["within_spread"])))
    elif status == "inconclusive" and verdict.get("reason"):
        notes.append(first_clause(str(verdict["reason"])))
    elif status == "changed" and verdict.get("kind") == "work":
        notes.append("the step does more work per step; if the test's workload grew on purpose, re-record")
    elif numeric(verdict) and status in ("unchanged", "improvement", "inconclusive") and _past_limit(verdict):
        base, value = _number(verdict.get("baseline")), _number(verdict.get("value"))
        allowance = MEMORY_SLACK_BYTES
        if verdict.get("kind") == "memory" and base is not None and value is not None:
            if abs(value - base) <= allowance:
                diff = value - base
                sign = "+" if diff >= 0 else "-"
                notes.append(f"{sign}{format_bytes(abs(diff))} is within the {format_bytes(allowance)} allowance")
        ci = verdict.get("ci")
        if not notes and _includes_no_change(ci):
            notes.append(f"95% CI {format_change(ci[0])}..{format_change(ci[1])} includes no change")
    elif status == "regression" and verdict.get("ci"):
        low, high = verdict["ci"]
        notes.append(f"95% CI {format_change(low)}..{format_change(high)}")
    if extra.get("budget_exhausted") and status != "info":  # an informational row decides nothing
        notes.append("time budget ran out")
    kernels = extra.get("kernel_change")  # how the step's kernels moved (pytest_gpuperf.judging.kernel_diff)
    if kernels and (verdict.get("kind") == "signature" or status in ("regression", "inconclusive")):
        notes.append(str(kernels))
    return "; ".join(notes)


def verdict_word(verdict: dict[str, Any]) -> str:
    """``REGRESSION``, ``ok (+40 KiB is within the 64 KiB allowance)`` ..."""
    word = STATUS_WORDS.get(str(verdict.get("status")), str(verdict.get("status")))
    reason = why(verdict)
    return f"{word} ({reason})" if reason else word


def short_fact(verdict: dict[str, Any]) -> str:
    """One line that carries a failing verdict: ``peak memory +27.6% > +5.0% (1.00 MiB -> 1.28 MiB)``."""
    label, unit = str(verdict.get("label", verdict.get("metric", "?"))), str(verdict.get("unit", ""))
    if verdict.get("status") == "new":
        return f"{label}: no baseline for this hardware"
    baseline, value = verdict.get("baseline"), verdict.get("value")
    values = f"{format_value(baseline, unit)} -> {format_value(value, unit)}" if baseline is not None else ""
    if verdict.get("kind") == "work":
        from pytest_gpuperf.judging.work import more_work

        return f"{more_work(_number(verdict.get('ratio')))} ({label} {values})" if values else f"{label} changed"
    if not numeric(verdict):
        return f"{label} changed: {values}" if values else f"{label} changed"
    better = str(verdict.get("better", "lower"))
    change, limit = change_text(verdict), limit_text(verdict)
    moved = float(verdict["ratio"]) - 1.0
    if better == "equal":
        relation = ">" if _past_limit(verdict) else "<="
        fact = f"{label} {change}, |change| {relation} {limit[1:]}"
    elif better == "higher":
        relation = (
            "<" if float(verdict["ratio"]) - 1.0 < regression_limit(better, float(verdict["tolerance"])) else ">="
        )
        slowdown = 1.0 / float(verdict["ratio"])
        fact = f"{label} {change} {relation} {limit} ({slowdown:.2f}x slower, tolerance {verdict['tolerance']:.0%})"
    else:
        relation = ">" if moved > float(verdict["tolerance"]) else "<="
        fact = f"{label} {change} {relation} {limit}"
    return f"{fact} ({values})" if values else fact
