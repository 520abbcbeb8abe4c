"""The ``--gpuperf-markdown`` PR summary (also appended to ``$GITHUB_STEP_SUMMARY`` when that is set).

Metric rows grouped by their own verdict (a section lists only its rows): regressions first,
then changed categories, improvements, inconclusive ones, metrics without a baseline, then the
unchanged ones (folded); the devices' fingerprints; baseline entries the PR changes against the
base ref; links to the run's artifacts. Everything that came from a test (ids, metric names,
messages, paths) is escaped (:mod:`.md_escape`): a test id cannot inject HTML or Markdown.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pytest_gpuperf.commands import update_command
from pytest_gpuperf.reporting.md_escape import code, fenced, text
from pytest_gpuperf.reporting.records import TestRecord
from pytest_gpuperf.reporting.verdict_text import ab_title, slower_timing, why
from pytest_gpuperf.results import FAILING_STATUSES

#: Sections of metric rows, by the row's own verdict: a section lists only rows with its statuses.
SECTIONS = (
    (("regression",), "Regressions"),
    (("changed",), "Changed categories"),
    (("improvement",), "Improvements"),
    (("inconclusive",), "Inconclusive"),
    (("new",), "No baseline yet"),
    (("unchanged",), "Unchanged"),
    (("info",), "Informational (recorded, not judged)"),
    (("recorded",), "Recorded"),
)
ICONS = {
    "regression": ":red_circle:",
    "changed": ":red_circle:",
    "improvement": ":green_circle:",
    "inconclusive": ":yellow_circle:",
    "new": ":white_circle:",
    "unchanged": ":heavy_check_mark:",
    "recorded": ":memo:",
    "info": "",
}
#: (singular, plural) for the headline's counts of tests.
COUNT_WORDS = {
    "regression": ("regression", "regressions"),
    "changed": ("changed category", "changed categories"),
    "improvement": ("improvement", "improvements"),
    "inconclusive": ("inconclusive", "inconclusive"),
    "new": ("without baseline", "without baseline"),
    "unchanged": ("unchanged", "unchanged"),
    "recorded": ("recorded", "recorded"),
    "info": ("informational only", "informational only"),
}
#: Every test status a headline counts, so its numbers add up to the perf tests it names.
HEADLINE_ORDER = ("regression", "changed", "improvement", "inconclusive", "new", "unchanged", "recorded", "info")
#: The verdict cell of an informational row (shown beside a regressed throughput, or folded at the end).
INFO_WORD = "not judged (informational)"
HEADER = "| test | metric | baseline | measured | change | limit | verdict |"
AB_HEADER = "| test | metric | A (ref) | B (this PR) | change | limit | verdict |"
RULE = "|---|---|--:|--:|--:|--:|---|"


def _row(record: TestRecord, verdict: dict[str, Any]) -> str:
    from pytest_gpuperf.reporting.terminal import row

    label, baseline, measured, change, limit, word = row(verdict)
    if verdict.get("status") == "info":
        word = INFO_WORD  # the terminal's "-" would read as a row without a verdict
        if verdict.get("kind") == "signature" and why(verdict):  # the step's kernels against the baseline's
            word = f"{INFO_WORD}: {why(verdict)}"
    icon = ICONS.get(verdict["status"], "")
    cells = [code(record.nodeid), text(label), text(baseline), text(measured), text(change), text(limit)]
    cells.append(f"{icon} {text(word)}".strip())
    return "| " + " | ".join(cells) + " |"


def _relative(path: str) -> str:
    """``path`` relative to the current folder when it lies below it (shorter in a PR comment)."""
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative


def _fingerprint_lines(devices: list[dict[str, Any]]) -> list[str]:
    from pytest_gpuperf.backends.fingerprint import describe

    lines = []
    for device in devices:
        fp = device["fingerprint"]
        software = text(", ".join(f"{k} {fp[k]}" for k in ("driver", "runtime", "torch") if fp.get(k)))
        line = f"- **{text(describe(fp))}** ({text(fp.get('backend', '?'))}, {text(fp.get('memory_gib', '?'))} GiB"
        line += f"; {software})" if software else ")"
        line += f": baseline file {code(_relative(str(device.get('baseline_file'))), in_table=False)}"
        changes = device.get("software_changes") or []
        if changes:
            line += f"; software differs from the baseline: {text('; '.join(changes))}"
        lines.append(line)
    return lines


def _baseline_change_lines(baseline_ref: Mapping[str, Any]) -> list[str]:
    changes = baseline_ref.get("changes") or []
    ref = baseline_ref.get("ref")
    commit = text(str(baseline_ref.get("commit", ""))[:12])
    title = f"### Baseline entries this PR changes against {code(str(ref), in_table=False)} ({commit})"
    if not changes:
        return [title, "", "None: every baseline file equals the one on the ref.", ""]
    loosened = sum(1 for c in changes if c.get("loosens"))
    lines = [title, ""]
    if loosened:
        lines += [f"> [!WARNING]\n> {loosened} change(s) loosen the gate; a maintainer should approve them.", ""]
    lines += ["| file | change | test | metric | detail |", "|---|---|---|---|---|"]
    for c in changes:
        flag = " :warning:" if c.get("loosens") else ""
        cells = [code(c["file"]), text(c["change"]) + flag, code(c["test"]) if c.get("test") else ""]
        cells += [text(c.get("metric") or ""), text(c.get("detail", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def artifact_links(artifacts: Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[str]:
    """Bullet lines naming the run's artifacts, linked to the GitHub Actions run page when known."""
    env = os.environ if env is None else env
    run_url = ""
    if env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        run_url = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    names = [str(v) for value in artifacts.values() for v in (value if isinstance(value, list) else [value]) if v]
    if not names and not run_url:
        return []
    lines = ["### Artifacts", ""]
    if run_url:
        lines.append(f"Download them from the [artifacts of this run]({run_url}#artifacts):")
    lines += [f"- {code(name, in_table=False)}" for name in names]
    return [*lines, ""]


def _context_rows(rows: list[tuple[TestRecord, dict[str, Any]]]) -> list[tuple[TestRecord, dict[str, Any]]]:
    """The informational time of each step whose throughput regressed, shown beside it (not judged, not counted)."""
    out = []
    for record, verdict in rows:
        step = str(verdict["metric"]).rpartition(".")[0]
        for other in record.verdicts:
            if other["status"] == "info" and other.get("kind") == "time" and other["metric"] == f"{step}.time":
                out.append((record, other))
    return out


def _failed_lines(records: list[TestRecord]) -> list[str]:
    """The tests that failed with no failing metric (their body raised, or a feature's reason failed them): every
    failure has a row and a verdict, with the first line of its message."""
    failed = [r for r in records if r.outcome == "failed" and r.status not in FAILING_STATUSES]
    if not failed:
        return []
    noun = f"{len(failed)} test{'s' if len(failed) != 1 else ''}"
    lines = [f"### :red_circle: Failed without a failing metric ({noun})", "", "| test | verdict |", "|---|---|"]
    lines += [f"| {code(r.nodeid)} | :red_circle: FAILED: {text(r.failure or 'failed')} |" for r in failed]
    return [*lines, ""]


def render_markdown(
    document: Mapping[str, Any],
    records: list[TestRecord],
    env: Mapping[str, str] | None = None,
    blocks: list[str] | None = None,
) -> str:
    """The PR summary for a JSON report ``document`` (see :mod:`.json_report`) and its records.

    ``blocks``: Markdown sections of feature plugins (the A/B comparison), placed after the headline.
    """
    gp = document["gpuperf"]
    counts = gp["summary"]
    parts = [
        f"{counts[s]} {COUNT_WORDS[s][counts[s] != 1]}" for s in HEADLINE_ORDER if counts.get(s) and s in COUNT_WORDS
    ] or ["nothing judged"]
    other = sum(1 for r in records if r.outcome == "failed" and r.status not in FAILING_STATUSES)
    verdict = ":red_circle:" if other or any(counts.get(s) for s in FAILING_STATUSES) else ":green_circle:"
    tests = f"{counts['tests']} perf tests" + (f", {other} failed without a failing metric" if other else "")
    lines = [f"## {verdict} pytest-gpuperf: {', '.join(parts)} ({tests})", ""]
    lines += [line for block in blocks or [] for line in (block.rstrip(), "")]
    if gp.get("mode") == "update":
        lines += ["Baselines were **recorded** in this run (`--gpuperf-update`); review the `baselines/` diff.", ""]
    lines += ["**Devices**", "", *_fingerprint_lines(gp["devices"]), ""]
    lines += _failed_lines(records)
    for statuses, title in SECTIONS:
        rows = [(r, v) for r in records for v in r.verdicts if v["status"] in statuses]
        if not rows:
            continue
        tests = len({r.nodeid for r, _ in rows})
        count = f"{len(rows)} metric{'s' if len(rows) != 1 else ''} of {tests} test{'s' if tests != 1 else ''}"
        ab = all(ab_title(v) for _, v in rows)
        shown = rows + (_context_rows(rows) if statuses[0] == "regression" else [])
        body = [AB_HEADER if ab else HEADER, RULE, *[_row(r, v) for r, v in shown]]
        if statuses[0] in ("unchanged", "info"):
            lines += [f"<details><summary>{title} ({count})</summary>", "", *body, "", "</details>", ""]
            continue
        lines += [f"### {ICONS[statuses[0]]} {title} ({count})", "", *body, ""]
        # A/B has nothing to record; --gpuperf-update records nothing of a test whose body failed
        stored = [(r, v) for r, v in rows if not ab_title(v) and not r.data.get("body_failed")]
        if statuses[0] in FAILING_STATUSES and stored:
            command = update_command((r.nodeid for r, _ in stored), accept_slower=slower_timing(v for _, v in stored))
            lines += ["If intended, record the new numbers with:", "", *fenced(command)]
            lines.append("")
    if gp.get("baseline_ref"):
        lines += _baseline_change_lines(gp["baseline_ref"])
    lines += artifact_links(gp.get("artifacts") or {}, env)
    return "\n".join(lines).rstrip() + "\n"
