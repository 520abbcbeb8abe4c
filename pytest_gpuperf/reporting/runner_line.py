"""The session line for a runner that moved: one line instead of N timing regressions (terminal, JSON, Markdown).

The session judges its tests against their common mode (:mod:`pytest_gpuperf.judging.common_mode`) and puts the
common mode a test was judged by on that test's report (``runner_change``, which survives xdist). This module reads
them back from the records: one line per process and backend (under xdist each worker is its own runner), the
tests the common mode explains (their time verdicts inconclusive, doubt ``runner``) and those still judged
against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.hookspecs import SummarySection
    from pytest_gpuperf.reporting.records import TestRecord

#: The doubt of a time verdict the common mode explains (:data:`pytest_gpuperf.judging.common_mode.RUNNER`).
RUNNER = "runner"


def _key(change: dict[str, Any]) -> tuple[str, str]:
    return str(change.get("worker", "")), str(change.get("backend", ""))


def runner_changes(records: list[TestRecord]) -> list[dict[str, Any]]:
    """One common mode per process and backend (the one judged from the most tests), with the tests it explained
    (``excused``) and those slower than it, still judged (``against``)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        change = record.data.get("runner_change")
        if not isinstance(change, dict):
            continue
        key = _key(change)
        kept = found.get(key)
        if kept is None or int(change.get("timed", 0)) > int(kept.get("timed", 0)):
            found[key] = {
                **change,
                "excused": (kept or {}).get("excused", []),
                "against": (kept or {}).get("against", []),
            }
        entry = found[key]
        doubts = [v for v in record.verdicts if v.get("doubt") == RUNNER]
        if doubts:
            entry["excused"].append(record.nodeid)
        if any("runner_relative" in (v.get("extra") or {}) for v in record.verdicts):
            entry["against"].append(record.nodeid)
    return list(found.values())


def runner_line(change: dict[str, Any]) -> str:
    """``gpuperf: the runner changed (cpu): 9 of 10 timed tests ran 1.50x slower together ...``."""
    worker = f" on {change['worker']}" if change.get("worker") else ""
    excused, against = len(change.get("excused", [])), len(change.get("against", []))
    still = f"; {against} test(s) slower than that still judged: {', '.join(change['against'])}" if against else ""
    return (
        f"gpuperf: the runner changed ({change.get('backend', '?')}{worker}): {change.get('moved')} of "
        f"{change.get('timed')} timed tests ran {float(change.get('ratio', 0)):.2f}x slower together (median; spread "
        f"{float(change.get('spread', 0)):.0%}); {excused} time verdict(s) inconclusive instead of failing{still}; "
        "compare on one runner with --gpuperf-ab REF, or re-record here with --gpuperf-update"
    )


def runner_markdown(change: dict[str, Any]) -> str:
    """The Markdown note: the same facts, the test ids as code spans."""
    from pytest_gpuperf.reporting.md_escape import code, text

    against = change.get("against", [])
    still = (
        f" Still judged, slower than that: {', '.join(code(n, in_table=False) for n in against)}." if against else ""
    )
    facts = text(
        f"{change.get('moved')} of {change.get('timed')} timed {change.get('backend', '?')} tests ran "
        f"{float(change.get('ratio', 0)):.2f}x slower together (median; spread {float(change.get('spread', 0)):.0%}); "
        f"{len(change.get('excused', []))} time verdict(s) inconclusive instead of failing."
    )
    return f"> :warning: **The runner changed**: {facts}{still} Compare on one runner with `--gpuperf-ab REF`."


def runner_section(records: list[TestRecord]) -> SummarySection | None:
    """The block of the reports: a yellow terminal line, a Markdown note and ``runner_changes`` in the JSON."""
    changes = runner_changes(records)
    if not changes:
        return None
    from pytest_gpuperf.hookspecs import SummarySection

    lines = tuple((runner_line(change), {"yellow": True, "bold": True}) for change in changes)
    markdown = "\n\n".join(runner_markdown(change) for change in changes)
    return SummarySection("", lines, order=5, markdown=markdown, json={"runner_changes": changes})
