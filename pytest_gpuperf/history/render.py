"""``gpuperf history``'s outputs: the terminal table, the JSON document and the Markdown summary."""

from __future__ import annotations

import json
from typing import Any

from pytest_gpuperf.history.analysis import Finding

#: Version of the ``gpuperf history --json`` document (docs/report-format.md); only ever gains keys.
FORMAT_VERSION = 1


def short(sha: str) -> str:
    """A commit's abbreviated sha (report ids that are not shas pass as they are)."""
    return sha[:9] if len(sha) >= 12 and all(c in "0123456789abcdef" for c in sha) else sha


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:+.1f}%"


def step_text(finding: Finding) -> str:
    """The change points of a series in one phrase: ``+30.2% near abc123 (abc122..abc124, p=0.0001)``."""
    parts = []
    for step in finding.steps:
        where = short(step.commit)
        if step.earliest != step.latest:
            where += f" ({short(step.earliest)}..{short(step.latest)})"
        parts.append(f"{_percent(step.point.change)} near {where}, p={step.point.p_value:.2g}")
    return "; ".join(parts) or "none"


def _rows(findings: list[Finding]) -> list[list[str]]:
    rows = []
    for finding in findings:
        series = finding.series
        last = series.points[-1]
        creep = ""
        if finding.creeping:
            creep = f"CREEP past {finding.creep_tolerance * 100:.0f}%" if finding.creep_tolerance else "CREEP"
        rows.append(
            [
                series.test,
                series.metric,
                series.device,
                str(len(series.points)),
                f"{last.value:.6g} {series.unit}".strip(),
                _percent(finding.drift),
                step_text(finding),
                creep,
            ]
        )
    return rows


HEADER = ["test", "metric", "device", "points", "last", "drift", "change points", ""]


def terminal_table(findings: list[Finding]) -> str:
    """A plain-text table, one row per series."""
    rows = [HEADER, *_rows(findings)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths).rstrip())
    return "\n".join(lines)


def markdown(findings: list[Finding], title: str = "Performance history") -> str:
    """A Markdown section for a PR or a job summary (test text escaped as code spans)."""
    from pytest_gpuperf.reporting import md_escape

    lines = [f"## {title}", "", "| " + " | ".join(h or "flag" for h in HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in _rows(findings):
        cells = [*(md_escape.code(c) for c in row[:3]), *(md_escape.text(c) for c in row[3:])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def as_json(findings: list[Finding], notes: list[str]) -> dict[str, Any]:
    """The ``--json`` document: each series with its points, change points and drift."""
    series = []
    for finding in findings:
        s = finding.series
        series.append(
            {
                "test": s.test,
                "metric": s.metric,
                "device": s.device,
                "unit": s.unit,
                "better": s.better,
                "kind": s.kind,
                "points": [
                    {"commit": p.commit, "date": p.date, "value": p.value, "spread": p.spread, "source": p.source,
                     "subject": p.subject}
                    for p in s.points
                ],
                "change_points": [
                    {
                        "commit": step.commit,
                        "earliest": step.earliest,
                        "latest": step.latest,
                        "index": step.point.index,
                        "before": step.point.before,
                        "after": step.point.after,
                        "change": step.point.change,
                        "p_value": step.point.p_value,
                    }
                    for step in finding.steps
                ],
                "drift": finding.drift,
                "creep_tolerance": finding.creep_tolerance,
                "creeping": finding.creeping,
            }
        )
    return {"format": "pytest-gpuperf-history", "format_version": FORMAT_VERSION, "series": series, "notes": notes}


def write_json(path: str, findings: list[Finding], notes: list[str]) -> None:
    """Write the JSON document atomically (``-`` for standard output)."""
    text = json.dumps(as_json(findings, notes), indent=1)
    write_text(path, text + "\n")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically, as the reports are (``-``: standard output)."""
    import sys
    from pathlib import Path

    from pytest_gpuperf.reporting.files import write_report

    if path == "-":
        sys.stdout.write(text)
        return
    write_report(Path(path), text)
