"""Terminal output under ``--gpuperf``, following pytest's verbosity, and the failing test's message.

* ``-q``: one summary line (``gpuperf: 9 tests, 27 metrics: 26 ok, 1 regression``);
* default: that line plus one row per metric that is not ok (regressed, improved, changed,
  no baseline, inconclusive) and what to do about them;
* ``-v``: a table per test with every metric.

A failing test's own message (its ``longrepr``) starts with the short fact
(``peak memory +27.6% > +5.0% (1.00 MiB -> 1.28 MiB)``), which pytest's short test summary
shows after ``FAILED ...``; its table is printed once, in the summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.commands import update_command
from pytest_gpuperf.reporting.verdict_text import (
    NOT_OK,
    STATUS_WORDS,
    ab_title,
    change_text,
    limit_text,
    short_fact,
    slower_timing,
    verdict_word,
)
from pytest_gpuperf.results import FAILING_STATUSES
from pytest_gpuperf.units import format_value

if TYPE_CHECKING:
    from pytest_gpuperf.reporting.records import TestRecord

HEADER = ["metric", "baseline", "measured", "change", "limit", "verdict"]
#: The same columns in an A/B run, where the "baseline" is REF's side and "measured" the working tree's.
AB_HEADER = ["metric", "A (ref)", "B (tree)", "change", "limit", "verdict"]


def header_for(verdicts: Iterable[dict[str, Any]]) -> list[str]:
    """:data:`AB_HEADER` when every verdict comes from an A/B comparison, else :data:`HEADER`."""
    listed = list(verdicts)
    ab = bool(listed) and all(ab_title(v) for v in listed)
    return AB_HEADER if ab else HEADER


def row(verdict: dict[str, Any]) -> list[str]:
    """One table row: metric, baseline, measured, change, the applied limit, verdict (with what decided it)."""
    unit = verdict["unit"]
    baseline = verdict.get("baseline")
    return [
        verdict["label"],
        format_value(baseline, unit) if baseline is not None else "-",
        format_value(verdict["value"], unit),
        change_text(verdict),
        limit_text(verdict),
        verdict_word(verdict),
    ]


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """Left-aligned text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def failure_longrepr(node_id: str, verdicts: list[dict[str, Any]], failures: list[str]) -> str:
    """A failing perf test's message: the short fact first (pytest's short summary shows that line),
    then the judge's full sentences, then how to accept an intended change.

    A failure under ``--gpuperf-strict`` (no baseline, inconclusive) has no short fact: its first sentence is the
    head line, said once.
    """
    failing = [v for v in verdicts if v.get("status") in FAILING_STATUSES]
    if failing:
        head, body = "; ".join(short_fact(v) for v in failing), failures
    else:
        failing = [v for v in verdicts if v.get("status") == "new"]
        head, body = (failures[0], failures[1:]) if failures else ("performance regression", [])
    hint = accept_hint(node_id, failing) if failing else ""
    return "\n".join([head, *("  " + line for line in body), *([hint] if hint else [])])


def accept_hint(node_id: str, failing: list[dict[str, Any]]) -> str:
    """How to accept an intended change: record a stored baseline, or (A/B) nothing to record.

    In an A/B run a metric can fail by the A/B comparison (nothing to record) or by the stored baseline that keeps
    gating memory, categories and recorded metrics (its message says "against the stored baseline"): then the
    baseline is what to update. A slower time/throughput is written only with ``--gpuperf-accept-slower``.
    """
    stored_failing = [v for v in failing if not ab_title(v) or "against the stored baseline" in str(v.get("message"))]
    command = update_command([node_id], accept_slower=slower_timing(stored_failing))
    record = f"If this change is intended, record it with: {command} and commit the baselines/ diff."
    ab_failing = [v for v in failing if ab_title(v)]
    if not ab_failing:
        return record
    by_ab = [v for v in ab_failing if "against the stored baseline" not in str(v.get("message", ""))]
    lines = []
    if by_ab:
        lines.append(
            f"{ab_title(by_ab[0])}: the working tree (B) measured worse than the ref (A) in interleaved "
            "processes on this machine. If the change is intended, accept it in review: an A/B verdict has no "
            "baseline file to update."
        )
    if len(by_ab) < len(failing):
        lines.append(record.replace("this change", "the change against the stored baseline"))
    return "\n".join(lines)


def summary_line(reported: Iterable[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> str:
    """``gpuperf: 9 tests, 27 metrics: 25 ok, 1 REGRESSION, 1 no baseline (AMD EPYC)``."""
    tests, counts, devices = 0, Counter[str](), []
    for _, data, verdicts in reported:
        tests += 1
        device = (data.get("fingerprint") or {}).get("device_name")
        if device and device not in devices:
            devices.append(device)
        for verdict in verdicts:
            status = str(verdict.get("status"))
            word = "ok" if status == "unchanged" else STATUS_WORDS.get(status, status)
            if status == "recorded":  # what --gpuperf-update did with it: the file line says the same
                if data.get("outcome") == "failed":
                    word = "not recorded (test failed)"
                elif (verdict.get("extra") or {}).get("baseline_kept"):
                    word = "kept within tolerance"
            counts[word] += 1
    metrics = sum(counts.values())
    order = ["ok", "REGRESSION", "CHANGED", "improved", "no baseline", "inconclusive", "recorded"]
    order += ["kept within tolerance", "not recorded (test failed)", "-"]
    parts = [f"{counts[w]} {'informational' if w == '-' else w}" for w in order if counts[w]]
    parts += [f"{n} {w}" for w, n in counts.items() if w not in order]
    where = f" ({', '.join(devices)})" if devices else ""
    return f"gpuperf: {tests} test{'s' if tests != 1 else ''}, {metrics} metrics: {', '.join(parts)}{where}"


def write_terminal_summary(terminalreporter: Any, records: Iterable[TestRecord]) -> None:
    """Write the ``gpuperf`` summary of ``records`` at pytest's verbosity, then what to do about new or improved
    metrics."""
    tr = terminalreporter
    reported = [(r.nodeid, {**r.data, "outcome": r.outcome}, r.verdicts) for r in records]
    if not reported:
        return
    verbosity = int(getattr(tr, "verbosity", 0) or 0)
    line = summary_line(reported)
    bad = any(v.get("status") in FAILING_STATUSES for _, _, vs in reported for v in vs)
    if verbosity < 0:
        tr.write_line(line, red=bad, bold=bad)
        return
    tr.write_sep("=", "gpuperf summary")
    tr.write_line(line, red=bad, bold=bad)
    if verbosity > 0:
        for node_id, data, verdicts in reported:
            device = (data.get("fingerprint") or {}).get("device_name", "?")
            tr.write_line(f"{node_id}  [{device}]")
            for text in render_table([row(v) for v in verdicts], header_for(verdicts)):
                tr.write_line("    " + text)
    else:
        listed = [(node_id, v) for node_id, _, verdicts in reported for v in verdicts if v["status"] in NOT_OK]
        rows = [[node_id, *row(v)] for node_id, v in listed]
        if rows:
            for text in render_table(rows, ["test", *header_for(v for _, v in listed)]):
                tr.write_line("  " + text)
            tr.write_line("  (every metric: pytest -v)")
    _write_notes(tr, reported, verbose=verbosity > 0 or not warnings_shown(getattr(tr, "config", None)))


def warnings_shown(config: Any) -> bool:
    """False when pytest shows no warnings summary (``--disable-warnings``, ``-p no:warnings``): an inconclusive
    verdict's reason, which is its warning, then needs a line of its own."""
    if config is None:
        return True
    disabled = bool(getattr(config.option, "disable_warnings", False))
    return config.pluginmanager.has_plugin("warnings") and not disabled


def _write_pinned(tr: Any, reported: list[tuple[str, dict[str, Any], list[dict[str, Any]]]]) -> None:
    """Once per run: the host calibration was pinned, so host-CPU times were judged against a fixed speed."""
    pinned = sorted(
        {str(p) for _, _, vs in reported for v in vs if (p := (v.get("extra") or {}).get("calibration_pinned"))}
    )
    if pinned:  # every host-CPU time verdict judged against a calibration that was not measured
        tr.write_line(
            f"note: the host calibration is pinned by {', '.join(pinned)}: host-CPU times are judged against a fixed "
            "machine speed, and a baseline stored with another calibration is not judged; unset it to judge this "
            "runner",
            yellow=True,
        )


def _write_notes(tr: Any, reported: list[tuple[str, dict[str, Any], list[dict[str, Any]]]], verbose: bool) -> None:
    """What to do about the run: budgets, software changes, the commands that record new or faster tests.

    An inconclusive verdict's full reason is pytest's warning (shown at the test, under ``-q`` too) and its first
    clause is the table row's; its own line here comes with ``-v``, or when pytest shows no warnings. A test whose
    body failed is never in a suggested update command: ``--gpuperf-update`` records nothing of a failed test.
    """
    new_tests: list[str] = []
    improved: list[str] = []
    less_work: list[str] = []
    budget: list[str] = []
    fingerprints: dict[str, dict[str, Any]] = {}
    for node_id, data, verdicts in reported:
        fingerprints[data.get("baseline_file", "")] = data
        statuses = {v["status"] for v in verdicts} if not data.get("body_failed") else set()
        if "new" in statuses:
            new_tests.append(node_id)
        if any(v["status"] == "improvement" and v.get("kind") == "work" for v in verdicts):
            less_work.append(node_id)
        elif "improvement" in statuses:
            improved.append(node_id)
        if any((v.get("extra") or {}).get("budget_exhausted") for v in verdicts):
            budget.append(node_id)
    _write_pinned(tr, reported)
    for node_id, _, verdicts in reported if verbose else []:  # why the machine could not decide, and what would
        for verdict in verdicts:
            if verdict["status"] == "inconclusive":
                tr.write_line(f"inconclusive: {node_id}: {verdict.get('message', '')}", yellow=True)
    if budget:
        tr.write_line(
            f"note: the time budget ran out before the target precision in {len(budget)} test(s) "
            "(raise the ini key gpuperf_max_time for a tighter estimate)"
        )
    for path, data in sorted(fingerprints.items()):
        changes = data.get("software_changes") or []
        if changes:
            tr.write_line(f"software differs from {path}: {'; '.join(changes)}")
    if new_tests:
        tr.write_line(
            f"{len(new_tests)} test(s) have no baseline for this hardware; record them with:\n"
            f"    {update_command(new_tests)}"
        )
    if less_work:
        tr.write_line(
            f"{len(less_work)} test(s) do less work per step than their baseline counted (an optimisation, or a "
            f"FLOPs/bytes hint corrected): an improvement; lock it in with:\n    {update_command(less_work)}"
        )
    if improved:
        tr.write_line(
            f"{len(improved)} test(s) measured faster than their baseline past the tolerance in this run; if a change "
            "made them faster, record the gain with the command below (it measures again, from fresh processes on the "
            f"CPU, and keeps the stored entry when the gain does not hold):\n    {update_command(improved)}"
        )
