"""The one collector of perf results: every test's call report (xdist workers' too) -> terminal, JSON, Markdown.

Registered on the controller under ``--gpuperf`` (:mod:`pytest_gpuperf.reporting.plugin`). It keeps each perf
test's :class:`~pytest_gpuperf.reporting.records.TestRecord` (outcome, ``REPORT_ATTR`` payload, user
properties); the terminal summary, the JSON, the Markdown and the plots read those records, and features add
their blocks through ``pytest_gpuperf_summary_sections`` (:mod:`pytest_gpuperf.hookspecs`), never by writing
this object's fields. JUnit XML gets the same facts as user properties of the report (``session.py``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baselines.diff import ref_changes
from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.reporting.files import append_report, write_report
from pytest_gpuperf.settings import get_option

if TYPE_CHECKING:
    from pytest_gpuperf.hookspecs import SummarySection
    from pytest_gpuperf.reporting.records import TestRecord

#: ``--gpuperf-json -`` / ``--gpuperf-markdown -``: the report goes to standard output (``-p no:terminal`` leaves
#: it alone there), not into a file named ``-``.
STDOUT = Path("-")


def summary_sections(config: pytest.Config, records: list[TestRecord]) -> list[SummarySection]:
    """The features' blocks of the reports, in their ``order``."""
    found = config.hook.pytest_gpuperf_summary_sections(config=config, records=records)
    return sorted((section for sections in found for section in sections or []), key=lambda s: s.order)


def write_sections(terminalreporter: Any, sections: list[SummarySection]) -> None:
    """Write the features' blocks into the terminal summary."""
    for section in sections:
        if section.title:
            terminalreporter.write_sep(section.sep, section.title)
        for line, markup in section.lines:
            terminalreporter.write_line(line, **markup)


def failure_line(report: pytest.TestReport) -> str:
    """The first line of a failed report's message (what pytest's short summary shows)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(crash.message if crash is not None else report.longrepr or "").strip()
    return text.splitlines()[0] if text else "failed"


def _to_stdout(config: pytest.Config, text: str) -> None:
    """Write a report to standard output on lines of its own, flushed before pytest's summary follows."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()  # after the progress dots
        reporter.flush()
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


class ReportCollector:
    """Keeps every perf test's call-phase record and writes the reports from them at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._records: dict[str, TestRecord] = {}
        self.lines: list[str] = []
        #: Reports that could not be written (a full disk, a folder in the way): one line each, in red.
        self.errors: list[str] = []
        self.baseline_ref: dict[str, Any] | None = None

    @property
    def records(self) -> list[TestRecord]:
        """Every perf test's record, in the order their reports came."""
        return list(self._records.values())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the call-phase outcome, the ``REPORT_ATTR`` payload and the user properties of every perf test."""
        from pytest_gpuperf.results import REPORT_ATTR

        data = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            from pytest_gpuperf.reporting.records import TestRecord

            properties = [(str(k), str(v)) for k, v in report.user_properties]
            record = TestRecord(report.nodeid, report.outcome, float(report.duration), data, properties)
            record.failure = failure_line(report) if report.failed else ""
            self._records[report.nodeid] = record

    def _path(self, flag: str) -> Path | None:
        value = get_option(self.config, flag)
        if not value:
            return None
        if value.strip() == "-":
            return STDOUT
        path = Path(os.path.expandvars(os.path.expanduser(value)))
        return path if path.is_absolute() else self.config.invocation_params.dir / path

    def _display(self, path: Path) -> str:
        if path == STDOUT:
            return "stdout"
        try:
            return path.relative_to(self.config.invocation_params.dir).as_posix()
        except ValueError:
            return str(path)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the plots, the JSON and the Markdown (in that order: later ones link the earlier)."""
        from pytest_gpuperf.reporting.json_report import build_report, json_text, write_json

        records = self.records
        self.baseline_ref = ref_changes(self.config)
        if self.baseline_ref is not None:
            self._judge_tolerances(session, records)
        json_path, md_path, plot_dir = (self._path(f) for f in ("--gpuperf-json", "--gpuperf-markdown", "gpuperf_plot"))
        artifacts: dict[str, Any] = {}
        if plot_dir is not None:
            artifacts["plots"] = self._write_plots(records, plot_dir, self.config.rootpath)
        if json_path not in (None, STDOUT):  # artifacts are files; a report on stdout is none
            artifacts["json"] = self._display(json_path)
        if md_path not in (None, STDOUT):
            artifacts["markdown"] = self._display(md_path)
        junit = getattr(self.config.option, "xmlpath", None)
        if junit:
            artifacts["junitxml"] = str(junit)
        gp_session = self.config.stash.get(SESSION_KEY, None)
        update = bool(gp_session and gp_session.settings.update)
        document = build_report(records, self.config.rootpath, self.baseline_ref, artifacts, update)
        sections = summary_sections(self.config, records)
        for section in sections:
            document["gpuperf"].update(section.json)
        if json_path == STDOUT:
            _to_stdout(self.config, json_text(document))
            self.lines.append(f"JSON report: written to stdout ({len(document['benchmarks'])} benchmarks)")
        elif json_path is not None and self._written(json_path, lambda: write_json(json_path, document)):
            self.lines.append(f"JSON report: {self._display(json_path)} ({len(document['benchmarks'])} benchmarks)")
        self._write_markdown(document, records, [s.markdown for s in sections if s.markdown], md_path)

    def _write_markdown(
        self, document: dict[str, Any], records: list[TestRecord], blocks: list[str], md_path: Path | None
    ) -> None:
        """The Markdown summary into ``md_path`` and onto ``$GITHUB_STEP_SUMMARY`` (unless turned off)."""
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if get_option(self.config, "gpuperf_no_step_summary"):
            summary_path = None
        if md_path is None and not summary_path:
            return
        from pytest_gpuperf.reporting.markdown import render_markdown

        text = render_markdown(document, records, blocks=blocks)
        if md_path == STDOUT:
            _to_stdout(self.config, text)
            self.lines.append("Markdown summary: written to stdout")
        elif md_path is not None and self._written(md_path, lambda: write_report(md_path, text)):
            self.lines.append(f"Markdown summary: {self._display(md_path)}")
        if summary_path and self._written(Path(summary_path), lambda: append_report(Path(summary_path), text + "\n")):
            self.lines.append(f"Markdown summary appended to $GITHUB_STEP_SUMMARY ({summary_path})")

    def _written(self, path: Path, write: Callable[[], None]) -> bool:
        """Run ``write``; an OSError (a full disk, a folder in the way) becomes one line of the summary, not a
        traceback that loses the others; the run's exit status stays pytest's."""
        try:
            write()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            self.errors.append(f"pytest-gpuperf: could not write {self._display(path)}: {reason}; nothing written")
            return False
        return True

    def _judge_tolerances(self, session: pytest.Session, records: list[TestRecord]) -> None:
        """The run's tolerances against the ref's (listed with the baseline changes); ``--gpuperf-strict`` fails
        the run on a looser one, since the ref keeps a PR from loosening the gate it is judged by."""
        from pytest_gpuperf.baselines.tolerance_ref import ref_tolerance_changes

        assert self.baseline_ref is not None
        tests = [(r.nodeid, str(r.fingerprint.get("backend", "")), r.verdicts) for r in records]
        looser = ref_tolerance_changes(self.config, tests)
        self.baseline_ref["changes"] += looser
        if looser and get_option(self.config, "--gpuperf-strict"):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.lines.append(
                f"--gpuperf-strict: {len(looser)} tolerance(s) looser than at {self.baseline_ref['ref']} "
                "(listed under the baseline changes): the run fails"
            )

    def _write_plots(self, records: list[TestRecord], directory: Path, root: Path) -> list[str]:
        from pytest_gpuperf.reporting.plot import PlotUnavailable, write_rooflines

        commit = os.environ.get("GITHUB_SHA", "")[:12]
        label = f"{len(records)} perf tests" + (f", commit {commit}" if commit else "")
        try:
            written, notes = write_rooflines(records, directory, root, label)
        except PlotUnavailable as exc:
            self.lines.append(f"gpuperf_plot {self._display(directory)}: {exc}")
            return []
        self.lines += notes
        self.lines += [f"roofline plot: {self._display(p)}" for p in written]
        return [self._display(p) for p in written]

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """gpuperf's terminal summary: the verdicts, the features' blocks, the baseline changes, the files written."""
        from pytest_gpuperf.reporting.terminal import write_terminal_summary

        tr = terminalreporter
        records = self.records
        write_terminal_summary(tr, records)
        write_sections(tr, summary_sections(self.config, records))
        if self.baseline_ref is not None:
            changes = self.baseline_ref["changes"]
            tr.write_sep("-", f"gpuperf baseline changes against {self.baseline_ref['ref']}")
            if not changes:
                tr.write_line("none: the working tree's baselines equal the ref's")
            for change in changes:
                where = " ".join(str(x) for x in (change["test"], change["metric"]) if x)
                flag = "  [LOOSENS THE GATE]" if change["loosens"] else ""
                head = f"{change['change']} {where}".strip()
                tr.write_line(f"{change['file']}: {head}: {change['detail']}{flag}")
        if self.lines or self.errors:
            tr.write_sep("-", "gpuperf reports")
            for line in self.lines:
                tr.write_line(line)
            for line in self.errors:
                tr.write_line(line, red=True, bold=True)
