"""pytest hooks of the reporting feature; imported at start-up, so nothing heavy at module level.

* ``--gpuperf-json PATH``, ``--gpuperf-markdown PATH`` (and ``$GITHUB_STEP_SUMMARY``),
  ``gpuperf_plot = DIR``: written by the controller at the end of a ``--gpuperf`` run from
  every test's report (so also from pytest-xdist workers' results);
* under ``--gpuperf-baseline-ref REF`` (:mod:`pytest_gpuperf.baselines.plugin`) the reports list
  the entries the working tree changes against the ref.

(One GPU per pytest-xdist worker is its own feature: :mod:`pytest_gpuperf.workers.plugin`.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baselines.plugin import ref_changes
from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.settings import add_options, get_option

if TYPE_CHECKING:
    from pytest_gpuperf.reporting.records import TestRecord

REPORTING_OPTIONS: list[tuple[Any, ...]] = [
    (
        "--gpuperf-json",
        "str",
        "",
        "write every perf test's metrics, baselines and verdicts to this JSON file",
        {"metavar": "PATH"},
    ),
    (
        "--gpuperf-markdown",
        "str",
        "",
        "write a Markdown PR summary to this file; also appended to $GITHUB_STEP_SUMMARY when that is set",
        {"metavar": "PATH"},
    ),
    ("gpuperf_no_step_summary", "bool", False, "do not append the Markdown summary to $GITHUB_STEP_SUMMARY"),
    (
        "gpuperf_plot",
        "str",
        "",
        "write one roofline PNG per device into this folder (needs matplotlib)",
        {"metavar": "DIR"},
    ),
]

COLLECTOR_NAME = "gpuperf-reporting"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the reporting flags and ini keys."""
    add_options(parser, REPORTING_OPTIONS, "reports")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--gpuperf``, on the controller: collect every test's results."""
    if config.stash.get(SESSION_KEY, None) is None or _is_worker(config):
        return  # workers send their results to the controller on their reports
    config.pluginmanager.register(ReportCollector(config), COLLECTOR_NAME)


class ReportCollector:
    """Collects perf results from reports (its own and xdist workers') and writes the reports at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[str, TestRecord] = {}
        self.lines: list[str] = []
        self.baseline_ref: dict[str, Any] | None = None
        #: Feature plugins add sections: ``extras`` under the JSON's ``gpuperf`` key, Markdown blocks after the title.
        self.extras: dict[str, Any] = {}
        self.markdown_blocks: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the call-phase outcome and the ``report.gpuperf`` payload of every perf test."""
        from pytest_gpuperf.results import REPORT_ATTR

        data = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            from pytest_gpuperf.reporting.records import TestRecord

            self.records[report.nodeid] = TestRecord(report.nodeid, report.outcome, float(report.duration), data)

    def _path(self, flag: str) -> Path | None:
        value = get_option(self.config, flag)
        if not value:
            return None
        path = Path(os.path.expandvars(os.path.expanduser(value)))
        return path if path.is_absolute() else self.config.invocation_params.dir / path

    def _display(self, path: Path) -> str:
        try:
            return path.relative_to(self.config.invocation_params.dir).as_posix()
        except ValueError:
            return str(path)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the plots, the JSON and the Markdown (in that order: later ones link the earlier)."""
        from pytest_gpuperf.reporting.json_report import build_report, write_json

        records = list(self.records.values())
        root = self.config.rootpath
        gp_session = self.config.stash.get(SESSION_KEY, None)
        self.baseline_ref = ref_changes(self.config)
        json_path, md_path, plot_dir = (
            self._path(f) for f in ("--gpuperf-json", "--gpuperf-markdown", "gpuperf_plot")
        )
        artifacts: dict[str, Any] = {}
        if plot_dir is not None:
            artifacts["plots"] = self._write_plots(records, plot_dir, root)
        if json_path is not None:
            artifacts["json"] = self._display(json_path)
        if md_path is not None:
            artifacts["markdown"] = self._display(md_path)
        junit = getattr(self.config.option, "xmlpath", None)
        if junit:
            artifacts["junitxml"] = str(junit)
        update = bool(gp_session and gp_session.settings.update)
        document = build_report(records, root, self.baseline_ref, artifacts, update)
        document["gpuperf"].update(self.extras)
        if json_path is not None:
            write_json(json_path, document)
            self.lines.append(f"JSON report: {self._display(json_path)} ({len(document['benchmarks'])} benchmarks)")
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if get_option(self.config, "gpuperf_no_step_summary"):
            summary_path = None
        if md_path is None and not summary_path:
            return
        from pytest_gpuperf.reporting.markdown import render_markdown

        text = render_markdown(document, records, blocks=self.markdown_blocks)
        if md_path is not None:
            md_path.parent.mkdir(parents=True, exist_ok=True)
            md_path.write_text(text, encoding="utf-8")
            self.lines.append(f"Markdown summary: {self._display(md_path)}")
        if summary_path:
            with open(summary_path, "a", encoding="utf-8") as handle:
                handle.write(text + "\n")
            self.lines.append(f"Markdown summary appended to $GITHUB_STEP_SUMMARY ({summary_path})")

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
        """Name the files written, and list the baseline entries changed against the ref."""
        if self.baseline_ref is not None:
            changes = self.baseline_ref["changes"]
            terminalreporter.write_sep("-", f"gpuperf baseline changes against {self.baseline_ref['ref']}")
            if not changes:
                terminalreporter.write_line("none: the working tree's baselines equal the ref's")
            for change in changes:
                where = " ".join(str(x) for x in (change["test"], change["metric"]) if x)
                flag = "  [LOOSENS THE GATE]" if change["loosens"] else ""
                head = f"{change['change']} {where}".strip()
                terminalreporter.write_line(f"{change['file']}: {head}: {change['detail']}{flag}")
        if self.lines:
            terminalreporter.write_sep("-", "gpuperf reports")
            for line in self.lines:
                terminalreporter.write_line(line)
