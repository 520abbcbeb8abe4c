"""Why a step's time moved, in kernels: its kernel signature against the one its baseline stored.

The signature (:mod:`pytest_gpuperf.timing.kernel_signature`) is informational: it never fails a test. What it
adds is the sentence a failing or inconclusive timing verdict of its step ends with:

* another digest: the kernels that appeared, disappeared, took a larger share of the step (10 points or more)
  or changed their launch count, with a switch written ``kernel switch: A -> B + C`` (a name sharing a prefix
  with the first one written ``..._rest``);
* the same digest with a slower time: ``same kernels as the baseline``, and that the machine, not the code, may
  have moved;
* no signature in the baseline (recorded before signatures were stored): nothing is said.

The baseline keeps only its heaviest kernels; the run knows all of its own, so a stored kernel the run lacks has
disappeared for certain, while a run kernel the stored list lacks appeared for certain only when the stored list
was complete (its ``distinct`` count), and otherwise is said to be new among the heaviest.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Verdict
from pytest_gpuperf.timing.kernel_signature import KIND_SIGNATURE, TOP_KERNELS

#: A change of a kernel's share of the step (absolute) that is named.
SHARE_MOVE = 0.10
#: Kernels named on each side of a switch.
NAMED = 3
#: Statuses of a timing verdict that get the sentence.
EXPLAINED = ("regression", "inconclusive")


def _rows(rows: Any) -> dict[str, dict[str, Any]]:
    """Rows by name (rows that are not mappings with a name are skipped: the file reader refuses them anyway)."""
    return {str(r["name"]): r for r in rows or [] if isinstance(r, dict) and "name" in r}


def _short_after(first: str, name: str) -> str:
    """``name`` with the prefix it shares with ``first`` (to an underscore) written ``...``."""
    common = next((i for i, (a, b) in enumerate(zip(first, name, strict=False)) if a != b), min(len(first), len(name)))
    cut = name.rfind("_", 0, common + 1)
    return f"...{name[cut:]}" if cut >= 8 and name != first else name


def _names(rows: list[dict[str, Any]], first: str, with_share: bool) -> str:
    parts = []
    for row in rows[:NAMED]:
        name = row["name"] if row["name"] == first else _short_after(first, row["name"])
        parts.append(f"{name} ({float(row.get('share', 0)):.0%})" if with_share else name)
    more = f" + {len(rows) - NAMED} more" if len(rows) > NAMED else ""
    return " + ".join(parts) + more


def _moved(base: dict[str, dict[str, Any]], run: dict[str, dict[str, Any]]) -> list[str]:
    """Kernels on both sides whose launch count or share of the step moved."""
    moved = []
    for name, old in base.items():
        new = run.get(name)
        if new is None:
            continue
        before, after = float(old.get("share", 0)), float(new.get("share", 0))
        if old.get("calls") != new.get("calls"):
            moved.append(f"{name} x{old.get('calls')} -> x{new.get('calls')} per step")
        elif after - before >= SHARE_MOVE:  # one that took more of the step (others shrink when one is added)
            moved.append(f"{name} {before:.0%} -> {after:.0%} of the step")
        elif old.get("grid") and new.get("grid") and old.get("grid") != new.get("grid"):
            moved.append(f"{name} grid {old['grid']} -> {new['grid']}")
    return moved


def kernel_change(extra: dict[str, Any], entry: dict[str, Any]) -> tuple[str, bool]:
    """(what changed between the baseline ``entry``'s signature and the run's metric ``extra``, same digest)."""
    digest, stored = extra.get("digest"), entry.get("value")
    if digest == stored:
        return f"same kernels as the baseline (signature {digest})", True
    base = _rows(entry.get("kernels"))
    run_all = _rows(extra.get("all_kernels") or extra.get("kernels"))
    complete = int(entry.get("distinct") or len(base)) <= len(base)
    ordered = sorted(run_all.values(), key=lambda r: -float(r.get("share", 0)))
    gone = [row for name, row in base.items() if name not in run_all]
    top = ordered if complete else ordered[:TOP_KERNELS]
    new = [row for row in top if row["name"] not in base]
    parts = []
    if gone and new:
        first = gone[0]["name"]
        parts.append(f"kernel switch: {_names(gone, first, False)} -> {_names(new, first, True)}")
    elif new:
        what = "kernels added" if complete else "new among the heaviest kernels"
        parts.append(f"{what}: {_names(new, new[0]['name'], True)}")
    elif gone:
        parts.append(f"kernels gone: {_names(gone, gone[0]['name'], False)}")
    parts += _moved(base, run_all)[:NAMED]
    launches, stored_launches = extra.get("launches"), entry.get("launches")
    if isinstance(stored_launches, int) and launches != stored_launches:
        parts.append(f"{stored_launches} -> {launches} launches per step")
    if not parts:
        parts.append(f"kernel signature {stored} -> {digest} (launch shapes or lighter kernels changed)")
    return "; ".join(parts), False


def explain_kernels(verdicts: list[Verdict], entries: dict[str, Any]) -> list[Verdict]:
    """``verdicts`` with each step's signature compared with its baseline's, and each failing or inconclusive
    timing verdict of that step saying it (module doc). Saying it twice is avoided, so a confirmation may call it
    again."""
    said: dict[str, tuple[str, bool]] = {}
    for verdict in verdicts:
        metric = verdict.metric
        entry = entries.get(metric.name)
        if metric.kind == KIND_SIGNATURE and isinstance(entry, dict) and isinstance(entry.get("value"), str):
            text, same = kernel_change({**metric.extra, "digest": metric.value}, entry)
            metric.extra["kernel_change"] = text
            if isinstance(entry.get("kernels"), list):
                metric.extra["baseline_kernels"] = entry["kernels"]
            said[metric.name.rpartition(".")[0]] = (text, same)
    if not said:
        return verdicts
    out = []
    for verdict in verdicts:
        step = verdict.metric.name.rpartition(".")[0]
        if verdict.metric.kind == KIND_SIGNATURE and step in said:
            verdict = replace(verdict, message=f"{verdict.metric.label()}: {said[step][0]}")
        elif _explained(verdict) and step in said:
            text, same = said[step]
            slower = "regression" in (verdict.status, verdict.suspected)
            if same and slower:
                text += ": the machine, not the code, may have moved"
            verdict.metric.extra["kernel_change"] = text
            if text not in verdict.message:
                verdict = replace(verdict, message=f"{verdict.message}; {text}")
        out.append(verdict)
    return out


def _explained(verdict: Verdict) -> bool:
    """A judged time/throughput verdict that fails or could not decide."""
    return (
        verdict.metric.kind in (KIND_TIME, KIND_THROUGHPUT)
        and verdict.metric.judged
        and verdict.status in EXPLAINED
        and bool(verdict.message)
    )
