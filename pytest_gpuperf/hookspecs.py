"""The hooks through which feature plugins extend the core (registered by ``pytest_addhooks``), and their answers.

Like pytest-xdist's ``newhooks.py``: a feature implements these in its plugin module (or in an
object it registers with ``config.pluginmanager.register``); it never reaches into the session
or into another feature's fields.

Measuring and judging:

* :func:`pytest_gpuperf_after_measure`: add metrics (bound verdicts, profiler numbers) to a step;
* :func:`pytest_gpuperf_measure_instead`: run a step in place of measuring it (the ncu child's capture window);
* :func:`pytest_gpuperf_rank_measure_instead`: the same, in the ranks of a distributed test (sent with its task);
* :func:`pytest_gpuperf_after_world`: add metrics to the steps a distributed test measured on its ranks;
* :func:`pytest_gpuperf_baseline_loader`: read baselines from somewhere else (a git ref);
* :func:`pytest_gpuperf_write_baselines`: veto writing this process's baseline updates (ranks != 0);
* :func:`pytest_gpuperf_run_in_fresh_processes`: run a test again in fresh processes (replication, confirmation).

A test's outcome (kept by the session, which alone decides pass or fail in its one ``pytest_runtest_makereport``):

* :func:`pytest_gpuperf_replace_verdicts`: report a feature's own verdicts in place of the stored-baseline ones (A/B);
* :func:`pytest_gpuperf_failure_reasons`: fail a test for a feature's own reason (a ``bound=`` mismatch);
* :func:`pytest_gpuperf_report_sections`: add a section, properties and payload keys to a test's call report.

The run's reports (read from the one collector of call reports, :mod:`pytest_gpuperf.reporting.collector`):

* :func:`pytest_gpuperf_summary_sections`: add a titled block to the terminal summary, the Markdown and the JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import MeasureContext, MeasureInstead
    from pytest_gpuperf.reporting.records import TestRecord
    from pytest_gpuperf.results import Metric, Verdict


@dataclass(frozen=True)
class VerdictsInstead:
    """A feature's own verdicts of a test, reported in place of the stored-baseline ones, and the test's context
    they were judged in (its fingerprint and baseline file go into the reports)."""

    verdicts: list[Verdict]
    context: TestContext


@dataclass(frozen=True)
class FailureReason:
    """Why a feature fails a test, tagged by its ``source`` (``judging``, ``profiling``, ``ab``).

    ``text`` is the test's failure message when this reason is the first to fail it (its first line is what
    pytest's short summary shows); ``detail`` is added beneath a failure that came first (the body's own error,
    or an earlier reason), under ``title`` where the failure has sections.
    """

    source: str
    text: str
    detail: str = ""
    title: str = ""


@dataclass(frozen=True)
class ReportSection:
    """What a feature adds to a test's call report.

    ``text``: a report section named ``title`` (pytest prints it under a failure); ``properties``: user
    properties, on the call report (they travel back from xdist workers) and, when ``junit``, on the item too
    (JUnit XML writes the item's); ``payload``: keys added to the report's ``results.REPORT_ATTR`` dict.
    """

    source: str
    title: str = ""
    text: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    junit: bool = True
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SummarySection:
    """A feature's block of the run's reports.

    ``lines`` (each with its terminal markup, e.g. ``{"yellow": True}``) go into the terminal summary under a
    ``sep`` rule titled ``title`` (no rule when the title is empty), in ``order`` (lower first, after the verdict
    summary); ``markdown`` is placed after the Markdown summary's headline; ``json`` is merged under the JSON
    report's ``gpuperf`` key.
    """

    title: str
    lines: tuple[tuple[str, dict[str, bool]], ...] = ()
    sep: str = "="
    order: int = 50
    markdown: str = ""
    json: dict[str, Any] = field(default_factory=dict)


def pytest_gpuperf_after_measure(context: MeasureContext) -> list[Metric] | None:
    """Return extra metrics for a step the core just timed (``context.timing``) and measured.

    Called once per ``gpuperf.measure()`` in the pytest process, after timing and before
    judging; the returned metrics are judged, stored and reported like the core's own.
    ``context.judging`` answers baseline questions (``entry(context.test, name)``).
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_measure_instead(context: TestContext, step: Callable[[], object], name: str) -> bool | None:
    """Run ``step`` in place of measuring it; return True when done (first non-None wins).

    Asked at each ``gpuperf.measure()`` of the pytest process before anything is timed; a True answer skips the
    whole measurement (nothing timed, judged or stored; the call returns an empty measurement). The ncu child
    answers it: there a step is only called for its capture window, never sampled.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_rank_measure_instead(item: pytest.Item) -> MeasureInstead | None:
    """Return a picklable :data:`~pytest_gpuperf.extensions.MeasureInstead` for the ranks of the distributed test
    ``item`` (first non-None wins).

    Asked in the pytest process when the test's task is built; the answer travels with the task and each rank's
    ``gpuperf`` handle asks it before measuring a step, as :func:`pytest_gpuperf_measure_instead` is asked in the
    pytest process (the ncu child answers it: rank 0 opens the step's capture window).
    """


def pytest_gpuperf_after_world(item: pytest.Item, context: TestContext, steps: dict[str, float]) -> list[Metric] | None:
    """Return extra metrics for the steps a distributed test measured on its ranks.

    Called once per test in the pytest process, after the ranks' metrics were gathered and before the world's are
    judged; ``steps`` maps each measured step's name to the slowest rank's seconds per call, ``context`` is the
    test's, in its world. The step itself ran on the ranks only: what needs it runs there
    (:func:`pytest_gpuperf_rank_measure_instead`). The returned metrics are judged with the world's.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_baseline_loader(config: pytest.Config) -> Callable[[Path], BaselineFile | None] | None:
    """Return a reader of baseline files to use instead of the working tree's (first non-None wins).

    Asked once, at the first baseline lookup; the same entries are sent to distributed ranks.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_write_baselines(config: pytest.Config) -> bool | None:
    """Return False to keep this process from writing its ``--gpuperf-update`` entries (first non-None wins)."""


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_run_in_fresh_processes(item: pytest.Item, processes: int) -> list[list[Metric]] | None:
    """Run the running test ``item`` again in ``processes`` fresh processes; return each one's metrics (unjudged).

    Called from the call phase, after the test body: to record a baseline from several processes
    (``gpuperf_processes``) and to confirm a suspected regression in a fresh process. Raise with the
    reason when the test cannot run elsewhere; return None when this plugin does not replicate.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_replace_verdicts(item: pytest.Item, verdicts: list[Verdict]) -> VerdictsInstead | None:
    """Return a feature's own verdicts of ``item`` to report in place of ``verdicts`` (first non-None wins).

    Asked once per test, at the end of its call phase, with the verdicts judged against the stored baselines
    (after their confirmation); the answer is what the warnings, the failure and every report show. A/B
    answers with its pair verdicts.
    """


def pytest_gpuperf_failure_reasons(item: pytest.Item, verdicts: list[Verdict]) -> list[FailureReason] | None:
    """Return reasons of a feature's own to fail ``item`` (its ``verdicts`` are the ones reported).

    Asked when the test's call report is made; the judging's reasons (regressions, changed categories, strict
    misses) come first.
    """


def pytest_gpuperf_report_sections(item: pytest.Item) -> list[ReportSection] | None:
    """Return what a feature adds to ``item``'s call report (a section, user properties, payload keys)."""


def pytest_gpuperf_summary_sections(config: pytest.Config, records: list[TestRecord]) -> list[SummarySection] | None:
    """Return a feature's blocks of the run's reports, read from ``records`` (every perf test's call report, xdist
    workers' too) and from the feature's own state. Asked when the JSON and Markdown are written and again for
    the terminal summary (also in a run without ``--gpuperf``, with no records)."""
