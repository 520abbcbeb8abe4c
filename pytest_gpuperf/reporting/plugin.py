"""pytest hooks of the reporting feature; imported at start-up, so nothing heavy at module level.

* ``--gpuperf-json PATH``, ``--gpuperf-markdown PATH`` (and ``$GITHUB_STEP_SUMMARY``),
  ``gpuperf_plot = DIR``: written by the controller at the end of a ``--gpuperf`` run from
  every test's report (so also from pytest-xdist workers' results);
* under ``--gpuperf-baseline-ref REF`` (:mod:`pytest_gpuperf.baselines.plugin`) the reports list
  the entries the working tree changes against the ref.

(One GPU per pytest-xdist worker is its own feature: :mod:`pytest_gpuperf.workers.plugin`.)
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.reporting.collector import ReportCollector, summary_sections, write_sections
from pytest_gpuperf.settings import add_options

REPORTING_OPTIONS: list[tuple[Any, ...]] = [
    (
        "--gpuperf-json",
        "str",
        "",
        "write every perf test's metrics, baselines and verdicts to this JSON file (-: stdout)",
        {"metavar": "PATH"},
    ),
    (
        "--gpuperf-markdown",
        "str",
        "",
        "write a Markdown PR summary to this file (-: stdout); also appended to $GITHUB_STEP_SUMMARY when that is set",
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
    """Under ``--gpuperf``, on the controller: the one collector of every test's results."""
    if config.stash.get(SESSION_KEY, None) is None or _is_worker(config):
        return  # workers send their results to the controller on their reports
    config.pluginmanager.register(ReportCollector(config), COLLECTOR_NAME)


def pytest_gpuperf_summary_sections(config: pytest.Config, records: list[Any]) -> list[Any] | None:
    """The session line of a runner that moved (:mod:`pytest_gpuperf.reporting.runner_line`)."""
    from pytest_gpuperf.reporting.runner_line import runner_section

    section = runner_section(records)
    return [section] if section is not None else None


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Without ``--gpuperf`` (no collector): the features' blocks alone (the rank pool's line)."""
    if config.stash.get(SESSION_KEY, None) is None:
        write_sections(terminalreporter, summary_sections(config, []))
