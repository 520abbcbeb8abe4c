"""The ``gpuperf`` command: ``gpuperf history`` and ``gpuperf show NODEID`` (also ``python -m pytest_gpuperf ...``).

Exit status: 0 when read, 1 when ``--fail-on-creep`` and a series creeps, 2 on a usage or read error.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from pytest_gpuperf.baselines.show import show
from pytest_gpuperf.history.analysis import Finding, analyse
from pytest_gpuperf.history.changepoints import DEFAULT_ALPHA
from pytest_gpuperf.history.render import markdown, terminal_table, write_json, write_text
from pytest_gpuperf.history.series import HistoryError, baseline_series, merged, report_points


def _matches(text: str, patterns: list[str]) -> bool:
    """True when ``text`` matches any pattern (a glob with ``*?[``, else a substring), or there are none."""
    if not patterns:
        return True
    return any(fnmatch.fnmatchcase(text, p) if any(c in p for c in "*?[") else p in text for p in patterns)


def history_parser() -> argparse.ArgumentParser:
    """The options of ``gpuperf history``."""
    parser = argparse.ArgumentParser(
        prog="gpuperf history",
        description="Each metric's accepted baselines over the git history (and saved --gpuperf-json reports): "
        "change points, drift since the first point, slow creep.",
    )
    parser.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder (default: baselines)")
    parser.add_argument("--since", metavar="REV", help="start at this revision (its values are the reference)")
    parser.add_argument("--reports", metavar="DIR", help="also read the --gpuperf-json reports in DIR (*.json)")
    parser.add_argument("-k", "--test", action="append", default=[], metavar="PATTERN", help="tests to show")
    parser.add_argument("--metric", action="append", default=[], metavar="PATTERN", help="metrics to show")
    parser.add_argument("--device", action="append", default=[], metavar="PATTERN", help="devices (file stems)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance of a change point")
    parser.add_argument("--min-change", type=float, default=0.01, metavar="FRACTION",
                        help="smallest step reported as a change point (default 0.01)")
    parser.add_argument("--creep-tolerance", type=float, metavar="FRACTION",
                        help="drift flagged as creep (default: twice the metric's default tolerance)")
    parser.add_argument("--changed-only", action="store_true", help="only series with a change point or creep")
    parser.add_argument("--fail-on-creep", action="store_true", help="exit 1 when a series creeps")
    parser.add_argument("--json", metavar="PATH", help="write the series as JSON (- for stdout)")
    parser.add_argument("--markdown", metavar="PATH", help="write a Markdown summary")
    parser.add_argument("--plot", metavar="DIR", help="one PNG per series and an index.html (needs matplotlib)")
    return parser


def history(argv: list[str]) -> int:
    """Run ``gpuperf history`` with ``argv``; its exit status."""
    args = history_parser().parse_args(argv)
    if not 0 < args.alpha < 1:
        print("gpuperf history: --alpha must be between 0 and 1", file=sys.stderr)
        return 2
    try:
        series = baseline_series(Path(args.baselines), args.since)
    except HistoryError as exc:
        print(f"gpuperf history: {exc}", file=sys.stderr)
        return 2
    notes: list[str] = []
    if args.reports:
        reports = Path(args.reports)
        if not reports.is_dir():
            print(f"gpuperf history: --reports {reports} is not a folder", file=sys.stderr)
            return 2
        points, notes = report_points(reports.glob("*.json"))
        series = merged(series, points)
    chosen = [
        s for s in series
        if _matches(s.test, args.test) and _matches(s.metric, args.metric) and _matches(s.device, args.device)
    ]
    findings = [analyse(s, alpha=args.alpha, min_change=args.min_change, creep=args.creep_tolerance) for s in chosen]
    if args.changed_only:
        findings = [f for f in findings if f.steps or f.creeping]
    findings.sort(key=lambda f: f.series.key)
    return _output(args, findings, notes)


def _output(args: argparse.Namespace, findings: list[Finding], notes: list[str]) -> int:
    """Print the table, write the files asked for; the exit status."""
    if args.json != "-":
        print(terminal_table(findings) if findings else "gpuperf history: no series matched")
        steps = sum(len(f.steps) for f in findings)
        creeping = sum(f.creeping for f in findings)
        print(f"{len(findings)} series, {steps} change point(s), {creeping} creeping")
        for note in notes:
            print(f"skipped {note}")
    if args.json:
        write_json(args.json, findings, notes)
    if args.markdown:
        write_text(args.markdown, markdown(findings))
    if args.plot:
        from pytest_gpuperf.history.plot import PlotUnavailable, write_plots

        try:
            written = write_plots(findings, Path(args.plot))
        except PlotUnavailable as exc:
            print(f"gpuperf history: {exc}", file=sys.stderr)
            return 2
        print(f"plots: {len(written) - 1} pictures and {written[-1]}")
    return 1 if args.fail_on_creep and any(f.creeping for f in findings) else 0


COMMANDS = {"history": history, "show": show}


def main(argv: list[str] | None = None) -> int:
    """``gpuperf COMMAND ...``: dispatch to a command; usage on anything else."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        names = ", ".join(COMMANDS)
        print(f"usage: gpuperf {{{names}}} [options]; gpuperf COMMAND --help for its options", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])
