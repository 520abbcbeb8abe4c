"""The ``--gpuperf-markdown`` PR summary (also appended to ``$GITHUB_STEP_SUMMARY`` when that is set).

Regressions first, then improvements, then tests without a baseline, then the unchanged
ones (folded); the devices' fingerprints; baseline entries the PR changes against the
base ref; links to the run's artifacts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pytest_gpuperf.reporting.records import TestRecord

SECTIONS = (
    ("regression", "Regressions"),
    ("changed", "Changed categories"),
    ("improvement", "Improvements"),
    ("new", "No baseline yet"),
    ("unchanged", "Unchanged"),
    ("recorded", "Recorded"),
)
ICONS = {
    "regression": ":red_circle:",
    "changed": ":red_circle:",
    "improvement": ":green_circle:",
    "new": ":white_circle:",
    "unchanged": ":heavy_check_mark:",
    "recorded": ":memo:",
    "info": "",
}
#: (singular, plural) for the headline's counts.
COUNT_WORDS = {
    "regression": ("regression", "regressions"),
    "changed": ("changed category", "changed categories"),
    "improvement": ("improvement", "improvements"),
    "new": ("without baseline", "without baseline"),
    "unchanged": ("unchanged", "unchanged"),
}
HEADER = "| test | metric | baseline | measured | change | tolerance | verdict |"
RULE = "|---|---|--:|--:|--:|--:|---|"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _rows(record: TestRecord, only_judged: bool) -> list[str]:
    from pytest_gpuperf.report import STATUS_WORDS, _row

    rows = []
    for verdict in record.verdicts:
        if only_judged and verdict["status"] == "info":
            continue
        label, baseline, measured, change, tol, word = _row(verdict)
        icon = ICONS.get(verdict["status"], "")
        word = STATUS_WORDS.get(verdict["status"], word)
        cells = [f"`{record.nodeid}`", label, baseline, measured, change, tol, f"{icon} {word}".strip()]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _relative(path: str) -> str:
    """``path`` relative to the current folder when it lies below it (shorter in a PR comment)."""
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative


def _fingerprint_lines(devices: list[dict[str, Any]]) -> list[str]:
    from pytest_gpuperf.fingerprint import describe

    lines = []
    for device in devices:
        fp = device["fingerprint"]
        software = ", ".join(f"{k} {fp[k]}" for k in ("driver", "runtime", "torch") if fp.get(k))
        line = f"- **{describe(fp)}** ({fp.get('backend', '?')}, {fp.get('memory_gib', '?')} GiB"
        line += f"; {software})" if software else ")"
        line += f": baseline file `{_relative(str(device.get('baseline_file')))}`"
        changes = device.get("software_changes") or []
        if changes:
            line += f"; software differs from the baseline: {'; '.join(changes)}"
        lines.append(line)
    return lines


def _baseline_change_lines(baseline_ref: Mapping[str, Any]) -> list[str]:
    changes = baseline_ref.get("changes") or []
    ref = baseline_ref.get("ref")
    title = f"### Baseline entries this PR changes against `{ref}` ({str(baseline_ref.get('commit', ''))[:12]})"
    if not changes:
        return [title, "", "None: every baseline file equals the one on the ref.", ""]
    loosened = sum(1 for c in changes if c.get("loosens"))
    lines = [title, ""]
    if loosened:
        lines += [f"> [!WARNING]\n> {loosened} change(s) loosen the gate; a maintainer should approve them.", ""]
    lines += ["| file | change | test | metric | detail |", "|---|---|---|---|---|"]
    for c in changes:
        flag = " :warning:" if c.get("loosens") else ""
        cells = [f"`{c['file']}`", c["change"] + flag, f"`{c['test']}`" if c.get("test") else "", c.get("metric") or ""]
        lines.append("| " + " | ".join(_cell(x) for x in [*cells, c.get("detail", "")]) + " |")
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
    lines += [f"- `{name}`" for name in names]
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
        f"{counts[s]} {COUNT_WORDS[s][counts[s] != 1]}" for s, _ in SECTIONS if counts.get(s) and s in COUNT_WORDS
    ] or ["nothing judged"]
    verdict = ":red_circle:" if counts.get("regression") or counts.get("changed") else ":green_circle:"
    lines = [f"## {verdict} pytest-gpuperf: {', '.join(parts)} ({counts['tests']} perf tests)", ""]
    lines += [line for block in blocks or [] for line in (block.rstrip(), "")]
    if gp.get("mode") == "update":
        lines += ["Baselines were **recorded** in this run (`--gpuperf-update`); review the `baselines/` diff.", ""]
    lines += ["**Devices**", "", *_fingerprint_lines(gp["devices"]), ""]
    for status, title in SECTIONS:
        group = [r for r in records if r.status == status]
        if not group:
            continue
        body = [HEADER, RULE, *[row for r in group for row in _rows(r, only_judged=True)]]
        if status == "unchanged":
            lines += [f"<details><summary>{title} ({len(group)} tests)</summary>", "", *body, "", "</details>", ""]
        else:
            lines += [f"### {ICONS[status]} {title} ({len(group)})", "", *body, ""]
            if status in ("regression", "changed"):
                ids = " ".join(f"'{r.nodeid}'" for r in group)
                lines += [
                    "If intended, record the new numbers with:",
                    "",
                    "```",
                    f"pytest --gpuperf --gpuperf-update {ids}",
                    "```",
                    "",
                ]
    if gp.get("baseline_ref"):
        lines += _baseline_change_lines(gp["baseline_ref"])
    lines += artifact_links(gp.get("artifacts") or {}, env)
    return "\n".join(lines).rstrip() + "\n"
