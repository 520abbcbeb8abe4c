"""Terminal output: the per-test metric table and the notes that tell a user what to do next."""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.units import format_change, format_value

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


def _row(verdict: dict[str, Any]) -> list[str]:
    unit = verdict["unit"]
    baseline = verdict.get("baseline")
    ratio = verdict.get("ratio")
    change = format_change(ratio) if isinstance(ratio, (int, float)) and ratio not in (0.0, float("inf")) else ""
    tolerance = verdict.get("tolerance")
    return [
        verdict["label"],
        format_value(baseline, unit) if baseline is not None else "-",
        format_value(verdict["value"], unit),
        change,
        f"{tolerance:.0%}" if isinstance(tolerance, (int, float)) and verdict["kind"] != "category" else "",
        STATUS_WORDS.get(verdict["status"], verdict["status"]),
    ]


def render_table(rows: list[list[str]], header: list[str]) -> list[str]:
    """Left-aligned text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


HEADER = ["metric", "baseline", "measured", "change", "tol", "verdict"]


def metric_section(verdicts: list[dict[str, Any]]) -> str:
    """The table of one test's metrics, shown as a report section of that test."""
    return "\n".join(render_table([_row(v) for v in verdicts], HEADER))


def write_terminal_summary(terminalreporter: Any, session: Any) -> None:
    """Write the ``gpuperf`` summary: a table per test, then what to do about new or improved metrics."""
    tr = terminalreporter
    for error in session.update_errors:
        tr.write_line(error, red=True, bold=True)
    if not session.reported:
        return
    tr.write_sep("=", "gpuperf summary")
    new_tests: list[str] = []
    improved: list[str] = []
    fingerprints: dict[str, dict[str, Any]] = {}
    for node_id, data, verdicts in session.reported:
        fingerprint = data.get("fingerprint", {})
        fingerprints[data.get("baseline_file", "")] = data
        tr.write_line(f"{node_id}  [{fingerprint.get('device_name', '?')}]")
        for line in render_table([_row(v) for v in verdicts], HEADER):
            tr.write_line("    " + line)
        statuses = {v["status"] for v in verdicts}
        if "new" in statuses:
            new_tests.append(node_id)
        if "improvement" in statuses:
            improved.append(node_id)
        if any(v.get("extra", {}).get("budget_exhausted") for v in verdicts):
            tr.write_line("    note: the time budget ran out before the target precision was reached")
    for path, data in sorted(fingerprints.items()):
        changes = data.get("software_changes") or []
        if changes:
            tr.write_line(f"software differs from {path}: {'; '.join(changes)}")
    if session.settings.update:
        files = sorted({data.get("baseline_file", "") for _, data, _ in session.reported})
        tr.write_line(f"baselines recorded in: {', '.join(files)} -- review the diff and commit it")
    if new_tests:
        tr.write_line(
            f"{len(new_tests)} test(s) have no baseline for this hardware; record them with:\n"
            "    pytest --gpuperf --gpuperf-update " + " ".join(f"'{n}'" for n in new_tests)
        )
    if improved:
        tr.write_line(
            f"{len(improved)} test(s) improved past tolerance; lock the gain in with:\n"
            "    pytest --gpuperf --gpuperf-update " + " ".join(f"'{n}'" for n in improved)
        )
