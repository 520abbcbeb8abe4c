"""What the working tree's baselines change against a git ref, and which changes loosen the gate.

Listed under ``--gpuperf-baseline-ref REF`` (terminal, JSON and Markdown reports).
A change loosens the gate when the new entry accepts worse results than the old
one: a slower time or a lower throughput (as value or as the judged quantile of
its samples), a larger peak memory, a removed test, metric or file, a changed
direction or kind, a number that is not finite or not possible any more, or a
working-tree file the reader refuses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.validate import number_or_none

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.baselines.ref import GitRef


@dataclass(frozen=True)
class BaselineChange:
    """One baseline entry the working tree changes against the ref."""

    file: str
    change: str
    test: str | None = None
    metric: str | None = None
    before: Any = None
    after: Any = None
    loosens: bool = False
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def loosening(entry_before: dict[str, Any], entry_after: dict[str, Any]) -> list[str]:
    """The fields whose edit makes the new entry accept worse results (or switches a check off); empty if none.

    Every field a verdict reads has a row in :data:`~pytest_gpuperf.baselines.fields.ENTRY_FIELDS` saying when
    its edit loosens the gate (a slower value or judged quantile, a larger process spread, another SM clock,
    another direction or kind); an entry the reader refuses where the old one was valid loosens it as a whole.
    """
    from pytest_gpuperf.baselines.fields import entry_problem, loosened_fields

    if entry_problem(entry_after) and not entry_problem(entry_before):
        return ["entry"]  # a NaN, a negative peak, a word where a number was: the comparison would switch off
    return loosened_fields(entry_before, entry_after)


def loosens(entry_before: dict[str, Any], entry_after: dict[str, Any]) -> bool:
    """True when the new entry accepts worse results than the old one (or no longer gates reliably)."""
    return bool(loosening(entry_before, entry_after))


def _metric_change(file: str, test: str, metric: str, before: dict[str, Any], after: dict[str, Any]) -> BaselineChange:
    from pytest_gpuperf.units import format_change, format_value

    fields = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    unit = str(after.get("unit", before.get("unit", "")))
    old, new = before.get("value"), after.get("value")
    if old != new and number_or_none(old) is not None and number_or_none(new) is not None and math.isfinite(float(new)):
        change = f" ({format_change(new / old)})" if old else ""
        detail = f"value {format_value(old, unit)} -> {format_value(new, unit)}{change}"
    elif old != new:
        detail = f"value {old} -> {new}"
    else:
        detail = "same value"
    others = [f for f in fields if f != "value"]
    if others:
        detail += f"; also changed: {', '.join(others)}"
    loosened = loosening(before, after)
    if loosened and loosened != ["value"]:
        detail += f"; loosened by: {', '.join(loosened)}"
    return BaselineChange(file, "metric changed", test, metric, old, new, bool(loosened), detail)


def diff_tests(
    file: str, before: dict[str, dict[str, dict[str, Any]]], after: dict[str, dict[str, dict[str, Any]]]
) -> list[BaselineChange]:
    """Changes between two ``tests`` mappings of one baseline file."""
    changes: list[BaselineChange] = []
    for test in sorted(set(before) | set(after)):
        if test not in after:
            n = len(before[test])
            changes.append(
                BaselineChange(file, "test removed", test, loosens=True, detail=f"{n} metric(s) no longer gated")
            )
            continue
        if test not in before:
            changes.append(BaselineChange(file, "test added", test, detail=f"{len(after[test])} metric(s)"))
            continue
        old, new = before[test], after[test]
        for metric in sorted(set(old) | set(new)):
            if metric not in new:
                value = old[metric].get("value")
                changes.append(
                    BaselineChange(file, "metric removed", test, metric, value, loosens=True, detail="no longer gated")
                )
            elif metric not in old:
                changes.append(BaselineChange(file, "metric added", test, metric, after=new[metric].get("value")))
            elif old[metric] != new[metric]:
                changes.append(_metric_change(file, test, metric, old[metric], new[metric]))
    return changes


def diff_against_ref(ref: GitRef, directory: Path) -> list[BaselineChange]:
    """Every baseline entry in the working tree's ``directory`` that differs from ``ref``."""
    from pytest_gpuperf.baselines.schema import BaselineError, load_baseline_file, parse_baseline_text

    names = sorted(set(ref.list_yaml(directory)) | {p.name for p in directory.glob("*.yaml")})
    changes: list[BaselineChange] = []
    for name in names:
        path = directory / name
        file = ref.relative(path)
        try:
            text = ref.read(path)
            old = parse_baseline_text(ref.label(path), text) if text is not None else None
        except BaselineError as exc:
            changes.append(BaselineChange(file, "unreadable at the ref", detail=str(exc)))
            continue
        try:
            new = load_baseline_file(path)
        except BaselineError as exc:  # a NaN or a broken file would fail or switch off every later run
            changes.append(BaselineChange(file, "unreadable", loosens=True, detail=str(exc)))
            continue
        if old is None and new is not None:
            changes.append(BaselineChange(file, "file added", detail=f"{len(new.tests)} test(s)"))
            changes += diff_tests(file, {}, new.stored)
        elif new is None and old is not None:
            changes.append(BaselineChange(file, "file removed", loosens=True, detail=f"{len(old.tests)} test(s)"))
            changes += diff_tests(file, old.stored, {})
        elif old is not None and new is not None:
            changes += diff_tests(file, old.stored, new.stored)
    return changes


def ref_changes(config: pytest.Config) -> dict[str, Any] | None:
    """Under ``--gpuperf-baseline-ref``: the ref, its commit and the entries the working tree changes against it."""
    from pytest_gpuperf.baselines.ref import REF_KEY
    from pytest_gpuperf.keys import SESSION_KEY

    ref = config.stash.get(REF_KEY, None)
    session = config.stash.get(SESSION_KEY, None)
    if ref is None or session is None:
        return None
    changes = [c.as_dict() for c in diff_against_ref(ref, session.settings.baselines_dir)]
    return {"ref": ref.ref, "commit": ref.commit, "changes": changes}
