"""The A/B section of the terminal summary and of the Markdown PR summary (the JSON gets the summary dict)."""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.results import FAILING_STATUSES
from pytest_gpuperf.units import format_change, format_value

WORDS = {
    "regression": "REGRESSION",
    "changed": "CHANGED",
    "inconclusive": "inconclusive",
    "improvement": "improved",
    "unchanged": "ok",
    "new": "new",
    "info": "-",
}
#: The same words in the section's headline, where a "-" would read as a typo.
HEAD_WORDS = {**WORDS, "info": "informational only"}
ICONS = {
    "regression": ":red_circle:",
    "changed": ":red_circle:",
    "inconclusive": ":warning:",
    "improvement": ":green_circle:",
    "unchanged": ":heavy_check_mark:",
    "new": ":white_circle:",
}


def show_value(value: Any, unit: str) -> str:
    """A value as the A/B reports show it ("-" for none)."""
    return format_value(value, unit) if isinstance(value, (int, float, str)) else "-"


def metric_row(metric: dict[str, Any]) -> list[str]:
    """[metric, A, B, change, pairs, tolerance, verdict] of one A/B metric."""
    unit = metric["unit"]
    ratio = metric.get("ratio")
    tolerance = metric.get("tolerance")
    pairs = metric.get("pairs") or []
    return [
        metric["label"],
        show_value(metric.get("a"), unit),
        show_value(metric.get("b"), unit),
        format_change(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else "",
        ", ".join(f"{(p - 1) * 100:+.0f}%" for p in pairs if p > 0),
        f"{tolerance:.0%}" if isinstance(tolerance, (int, float)) and metric["kind"] != "category" else "",
        WORDS.get(metric["status"], metric["status"]),
    ]


HEADER = ["metric", "A (ref)", "B (tree)", "change", "paired B/A", "tol", "verdict"]


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *rows]]


def how_line(summary: dict[str, Any], ref: str | None = None) -> str:
    """How the sides were measured (``ref``: how to show the ref and commit, default as they are)."""
    p = summary["processes"]
    if p["A"] or p["B"]:
        ran = f"{p['A']} A and {p['B']} B ran"
    else:
        ran = "started by the pytest-xdist workers" if summary.get("xdist") else "none ran: no perf test selected"
    shown = ref or f"{summary['ref']} ({summary['sha'][:12]})"
    return (
        f"A = {shown} in a temporary worktree, B = the working tree; alternating "
        f"A B B A ..., {p['min']} to {p['max']} worker processes per side ({ran}), "
        f"{summary['max_time']:g} s budget per measure()"
    )


def cost_line(summary: dict[str, Any]) -> str:
    """What A/B cost per test: wall time of all rounds, and each side's measuring ('' when nothing ran here)."""
    cost = summary.get("cost_per_test_s") or {}
    if not cost or not (cost.get("A") or cost.get("B")):
        return ""
    wall = summary.get("wall_per_test_s") or 0.0
    head = f"cost per test: {wall:.1f} s of wall time, " if wall else "cost per test: "
    return (
        f"{head}of which workers measured A {cost['A']:.1f} s, B {cost['B']:.1f} s "
        "(each worker started up while the one before it measured)"
    )


def terminal_lines(
    summary: dict[str, Any], verbosity: int = 0, reasons: bool = False
) -> list[tuple[str, dict[str, bool]]]:
    """Lines (with markup) of the terminal A/B section, at pytest's ``verbosity``.

    ``-q``: one line per test (its verdict), then warnings and errors; by default each test's table too, with the
    reason of a regression (an inconclusive metric's reason is pytest's warning, shown once); ``-v`` adds how the
    sides were measured first and every inconclusive reason (``reasons``: those reasons at any verbosity but ``-q``,
    when pytest shows no warnings).
    """
    quiet = verbosity < 0
    lines: list[tuple[str, dict[str, bool]]] = [] if quiet else [(how_line(summary), {})]
    for warning in summary["warnings"]:
        lines.append((f"WARNING: {warning}", {"yellow": True, "bold": True}))
    for error in summary.get("worker_errors") or []:
        lines.append((f"worker error: {error}", {"red": True}))
    explained = ("regression", "inconclusive") if verbosity > 0 or reasons else ("regression",)
    for nodeid, result in summary["tests"].items():
        status = result["status"]
        markup = {"red": True, "bold": True} if status in FAILING_STATUSES else {}
        if status == "inconclusive":
            markup = {"yellow": True}
        note = f"  ({result['note']})" if result.get("note") else ""
        lines.append((f"{nodeid}  {WORDS.get(status, status)}{note}", markup))
        if quiet:
            continue
        if result["metrics"]:
            lines += [("    " + row, {}) for row in _table([metric_row(m) for m in result["metrics"]])]
        for metric in result["metrics"]:
            if metric["status"] in explained:
                lines.append((f"    {metric['label']}: {metric['message']}", markup))
    if quiet:
        return lines
    if summary["new"]:
        lines.append((f"new (only in the working tree): {', '.join(summary['new'])}", {}))
    if summary["removed"]:
        lines.append((f"removed (only in {summary['ref']}): {', '.join(summary['removed'])}", {}))
    cost = cost_line(summary)
    if cost:
        lines.append((cost, {}))
    return lines


def markdown_lines(summary: dict[str, Any]) -> list[str]:
    """The Markdown A/B section a reviewer reads on the PR.

    Everything that came from a test, a git ref or a message is escaped (:mod:`~pytest_gpuperf.reporting.md_escape`)
    like the report's other sections: a test id or a category word cannot add HTML, images or links.
    """
    from pytest_gpuperf.reporting.md_escape import code, text

    tests = summary["tests"]
    counts: dict[str, int] = {}
    for result in tests.values():
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    head = ", ".join(f"{n} {HEAD_WORDS.get(s, s)}" for s, n in sorted(counts.items())) or "no test on both sides"
    ref, sha = code(summary["ref"], in_table=False), code(str(summary["sha"])[:12], in_table=False)
    lines = [f"### A/B against {ref} ({sha}): {head}", "", how_line(summary, f"{ref} ({sha})") + ".", ""]
    for warning in summary["warnings"]:
        lines += [f"> [!WARNING]\n> {text(warning)}", ""]
    rows = []
    for nodeid, result in tests.items():
        for metric in result["metrics"]:
            if metric["status"] == "info" and metric["kind"] not in ("category",):
                continue
            label, a, b, change, pairs, tol, word = metric_row(metric)
            icon = ICONS.get(metric["status"], "")
            if metric["kind"] == "category" or not isinstance(metric.get("ratio"), (int, float)):
                a, b = text(a), text(b)  # words from the test (a category), not numbers formatted here
            cells = [code(nodeid), text(label), a, b, change, pairs, tol, f"{icon} {text(word)}".strip()]
            rows.append("| " + " | ".join(cells) + " |")
    if rows:
        lines += [
            f"| test | metric | A ({code(summary['ref'])}) | B (this PR) | change | paired B/A | tolerance | verdict |",
            "|---|---|--:|--:|--:|--:|--:|---|",
            *rows,
            "",
        ]
    notes = [
        f"- {code(nodeid, in_table=False)} {text(metric['label'])}: {text(metric['message'])}"
        for nodeid, result in tests.items()
        for metric in result["metrics"]
        if metric["status"] in ("inconclusive", *FAILING_STATUSES)
    ]
    if notes:
        lines += ["**Why**", "", *notes, ""]
    if summary["new"]:
        lines += ["New perf tests (only in this PR): " + ", ".join(code(n, in_table=False) for n in summary["new"]), ""]
    if summary["removed"]:
        removed = ", ".join(code(n, in_table=False) for n in summary["removed"])
        lines += [f"Removed perf tests (only in {ref}): {removed}", ""]
    cost = cost_line(summary)
    if cost:
        lines += [cost + ".", ""]
    return lines
