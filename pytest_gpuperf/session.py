"""The active ``--gpuperf`` session's pytest hooks: one outcome per test, decided in one place.

Registered by :mod:`pytest_gpuperf.plugin` only when ``--gpuperf`` (or
``--gpuperf-update``) is given, so a plain pytest run never pays for it. Everything
about baselines and verdicts lives in the judging service (:mod:`pytest_gpuperf.judging.service`);
this module keeps each test's :class:`TestOutcome` and its one ``pytest_runtest_makereport`` decides
pass or fail and puts the outcome on the call report. Features contribute only through the hooks of
:mod:`pytest_gpuperf.hookspecs` (their own verdicts, failure reasons, report sections); they never
change a report themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.judging.service import Judging
from pytest_gpuperf.results import REPORT_ATTR, verdict_to_dict

#: The plugin an A/B worker process loads (``pytest_gpuperf.ab.runner.WORKER_MODULE``).
AB_WORKER_PLUGIN = "_gpuperf_ab_worker"

if TYPE_CHECKING:
    from pytest_gpuperf.hookspecs import FailureReason, ReportSection
    from pytest_gpuperf.results import Verdict
    from pytest_gpuperf.settings import Settings


@dataclass
class TestOutcome:
    """One test's outcome: the verdicts it reports, the reasons that fail it (each tagged by its source feature)
    and what features add to its report."""

    __test__ = False  # not a pytest test class

    node_id: str
    verdicts: list[Verdict] = field(default_factory=list)
    failures: list[FailureReason] = field(default_factory=list)
    sections: list[ReportSection] = field(default_factory=list)
    #: The features' reasons (kept when a held report is settled again) and the call report as the body left it.
    features: list[FailureReason] = field(default_factory=list)
    body: _Body | None = None

    @property
    def failed(self) -> bool:
        """True when a reason fails the test."""
        return bool(self.failures)


class GpuperfSession:
    """The judging service of this run and each test's outcome (updates: :mod:`pytest_gpuperf.baselines.plugin`)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings

        def ref_loader() -> Any:
            return config.hook.pytest_gpuperf_baseline_loader(config=config)

        from pytest_gpuperf.baselines.recording import choose_sink
        from pytest_gpuperf.baselines.sources import FileBaselines

        # The sink is chosen once, here: the gate, or the recorder under --gpuperf-update.
        self.judging = Judging(settings, FileBaselines(settings, ref_loader), choose_sink(config, settings))
        self.outcomes: dict[str, TestOutcome] = {}
        from pytest_gpuperf.judging.runner_watch import RunnerWatch

        # Held reports wait for the session's common mode; an xdist worker logs each during its test: progressive.
        self.runner = RunnerWatch(holds=not hasattr(config, "workerinput"))
        self._held: dict[str, tuple[pytest.Item, list[pytest.TestReport]]] = {}
        self._running = ""

    def pytest_configure(self, config: pytest.Config) -> None:
        """A GpuperfWarning for each ini tolerance >= 1: kept (a loose gate may be meant), saying how it is read."""
        from pytest_gpuperf.markers import fraction_hint
        from pytest_gpuperf.results import GpuperfWarning

        for name in ("time_tolerance", "cpu_time_tolerance", "memory_tolerance", "host_tolerance"):
            value = float(getattr(self.settings, name))
            if value >= 1 and not hasattr(config, "workerinput"):  # an xdist worker: its controller warned
                hint = fraction_hint(f"gpuperf_{name} = {value:g}", value)
                config.issue_config_time_warning(GpuperfWarning(hint), stacklevel=2)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Measure the host CPU's calibration once, before any test runs, when a selected test times on it."""
        from pytest_gpuperf.timing import calibration

        ab = self.config.pluginmanager.has_plugin(AB_WORKER_PLUGIN) or self.config.getoption("gpuperf_ab", None)
        calibration.set_enabled(not ab)  # A/B judges both sides on this machine: no stored time is compared
        if ab or self.judging.recording:
            self.runner.holds = False  # nothing judged against a baseline: no common mode to wait for
            self.runner.enabled = not ab  # A/B ran both sides on one runner: a common move is the code's
        self.runner.expect(item.nodeid for item in session.items if _perf_item(item))
        if not ab and any(_times_on_host_cpu(item) for item in session.items):
            try:
                calibration.process_calibration()
            except ValueError as exc:  # a malformed pinned value (calibration.PIN_ENV)
                raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """After a passing body: replicate it in fresh processes (recording) or confirm a suspect; settle the
        verdicts the test reports (a feature's own in their place); then warn."""
        outcome = yield
        node_id = item.nodeid
        if outcome.excinfo is None and node_id in self.judging.contexts:
            from pytest_gpuperf.judging.replication import can_replicate

            if can_replicate(item):
                self._replicate(item)
        instead = self.config.hook.pytest_gpuperf_replace_verdicts(
            item=item, verdicts=list(self.judging.verdicts.get(node_id, []))
        )
        if instead is not None:
            self.judging.report_instead(node_id, instead.context, instead.verdicts)
        self.outcomes[node_id] = TestOutcome(node_id, list(self.judging.verdicts.get(node_id, [])))
        from pytest_gpuperf.results import GpuperfWarning

        for line in self.judging.warnings_for(node_id):
            item.warn(GpuperfWarning(line))  # shown at the test's file and line, as pytest's own warnings are
        if outcome.excinfo is None and not self.outcomes[node_id].verdicts:
            unmeasured = _unmeasured(item)
            if unmeasured:
                item.warn(GpuperfWarning(unmeasured))

    def _replicate(self, item: pytest.Item) -> None:
        """``gpuperf_processes`` under ``--gpuperf-update``; else a fresh-process confirmation of a suspect."""
        from pytest_gpuperf.judging.replication import second_look

        def fresh(processes: int) -> tuple[list[dict[str, Any]], str]:
            runs, note = self._fresh_runs(item, processes)
            return [{m.name: m for m in run} for run in runs], note

        warning = second_look(self.judging, item.nodeid, fresh)
        if warning:
            from pytest_gpuperf.results import GpuperfWarning

            item.warn(GpuperfWarning(warning))

    def _fresh_runs(self, item: pytest.Item, processes: int) -> tuple[list[list[Any]], str]:
        """The metrics of ``processes`` fresh runs of ``item`` (through the hook), or none and why."""
        try:
            runs = self.config.hook.pytest_gpuperf_run_in_fresh_processes(item=item, processes=processes)
        except Exception as exc:  # noqa: BLE001 - a test that cannot run elsewhere keeps its own verdict
            return [], f"{type(exc).__name__}: {exc}"
        return list(runs or []), "" if runs else "no fresh process ran it"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """The one place that decides a perf test's outcome: gather it, put it on the call report, fail the report
        for the first reason (the judging's come first). A report the session's common mode may change waits."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when != "call":
            return
        node_id = item.nodeid
        test = self.outcomes.get(node_id) or TestOutcome(node_id, list(self.judging.verdicts.get(node_id, [])))
        self.outcomes[node_id] = test
        self._watch_runner(test, hold=report.passed and node_id == self._running)
        hook = self.config.hook
        test.body = _Body.of(item, report)
        test.features = [
            r for found in hook.pytest_gpuperf_failure_reasons(item=item, verdicts=test.verdicts) for r in found or []
        ]
        test.sections = [s for found in hook.pytest_gpuperf_report_sections(item=item) for s in found or []]
        self._settle(item, report, test)

    def _settle(self, item: pytest.Item, report: pytest.TestReport, test: TestOutcome) -> None:
        """Put ``test`` on its call report as the body left it: the payload, the properties, the failure."""
        assert test.body is not None
        test.body.restore(item, report)
        payload = [verdict_to_dict(v) for v in test.verdicts]
        test.failures = self._judging_failures(test.node_id, payload) + test.features
        data = {"verdicts": payload, "params": call_params(item), **self.judging.report_context(test.node_id)}
        if report.failed:  # the body's own failure: no update command may suggest recording this test
            data["body_failed"] = True
        if test.node_id in self.runner.modes:
            data["runner_change"] = self.runner.modes[test.node_id]
        _attach(item, report, test, data if payload else {})
        _fail(report, test.failures)

    def _watch_runner(self, test: TestOutcome, hold: bool) -> None:
        """Judge the test's timing against the session's common mode (:mod:`~.judging.runner_watch`), or, when
        ``hold`` (a passed body of the test :meth:`pytest_runtest_protocol` runs), hold its report until then."""
        context = self.judging.contexts.get(test.node_id)
        if context is None or not test.verdicts:
            return
        test.verdicts, _ = self.runner.judge(test.node_id, context.backend.name, test.verdicts, hold)
        self.judging.verdicts[test.node_id] = test.verdicts

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """A perf test's protocol with its reports logged here: at once, or once the common mode is decided."""
        if not self.runner.holds or not _perf_item(item):
            return None  # pytest's own protocol
        from _pytest.runner import runtestprotocol  # the protocol without logging, as rerun plugins use it

        self._running = item.nodeid
        try:
            reports = runtestprotocol(item, log=False, nextitem=nextitem)
        finally:
            self._running = ""
            self.runner.ran(item.nodeid)
        if item.nodeid in self.runner.held:
            self._held[item.nodeid] = (item, reports)
        else:
            _log(item, reports)
        self._release(self.runner.releasable())
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        """Reports still held when the session ends early (``-x``, an interrupt): judged with what is known, logged."""
        self._release(self.runner.release_all())

    def _release(self, judged: list[tuple[str, list[Verdict]]]) -> None:
        """Settle the held tests' call reports with their verdicts against the common mode, then log them."""
        for node_id, verdicts in judged:
            item, reports = self._held.pop(node_id)
            test = self.outcomes[node_id]
            test.verdicts = self.judging.verdicts[node_id] = verdicts
            for report in reports:
                if report.when == "call" and test.body is not None:
                    self._settle(item, report, test)
                elif report.when == "teardown":
                    report.user_properties = list(item.user_properties)  # as pytest copies them at teardown
            _log(item, reports)

    def _judging_failures(self, node_id: str, payload: list[dict[str, Any]]) -> list[FailureReason]:
        """The judging's reason to fail ``node_id`` (regressions, changed categories, strict misses), if any."""
        lines = self.judging.failure_lines(node_id)
        if not lines:
            return []
        from pytest_gpuperf.hookspecs import FailureReason
        from pytest_gpuperf.reporting.terminal import failure_longrepr  # first line: the short fact

        return [FailureReason("judging", failure_longrepr(node_id, payload, lines))]


@dataclass
class _Body:
    """A call report as the test body left it, before the session settled it (restored to settle it again)."""

    outcome: str
    longrepr: Any
    sections: int
    properties: int
    item_properties: int

    @classmethod
    def of(cls, item: pytest.Item, report: pytest.TestReport) -> _Body:
        """The call report as the body left it."""
        lengths = len(report.sections), len(report.user_properties), len(item.user_properties)
        return cls(report.outcome, report.longrepr, *lengths)

    def restore(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Undo what settling added to ``report`` (and to ``item``'s properties); a no-op the first time."""
        report.outcome, report.longrepr = self.outcome, self.longrepr  # type: ignore[assignment]
        del report.sections[self.sections :]
        del report.user_properties[self.properties :]
        del item.user_properties[self.item_properties :]
        if hasattr(report, REPORT_ATTR):
            delattr(report, REPORT_ATTR)


def _log(item: pytest.Item, reports: list[pytest.TestReport]) -> None:
    """Log one test's reports as pytest's own protocol does (start, each phase, finish)."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _perf_item(item: pytest.Item) -> bool:
    """A test that may report timing verdicts: it takes the gpuperf fixture, or its ranks are measured for it."""
    return "gpuperf" in getattr(item, "fixturenames", ()) or item.get_closest_marker("gpuperf_distributed") is not None


def _attach(item: pytest.Item, report: pytest.TestReport, test: TestOutcome, data: dict[str, Any]) -> None:
    """Put ``test`` on its call report: the payload (``REPORT_ATTR``, survives xdist), user properties, sections."""
    for section in test.sections:
        data.update(section.payload)
    if data:
        setattr(report, REPORT_ATTR, data)
    properties: list[tuple[tuple[str, str], bool]] = []
    for verdict in test.verdicts:
        value = f"{verdict.metric.value} {verdict.metric.unit}".strip()
        properties.append(((f"gpuperf.{verdict.metric.name}", f"{value} [{verdict.status}]"), True))
    for verdict in test.verdicts:
        if verdict.status == "inconclusive":
            properties.append(((f"gpuperf.{verdict.metric.name}.inconclusive", verdict.message), True))
    for section in test.sections:
        if section.text:
            report.sections.append((section.title, section.text))
        properties += [(prop, section.junit) for prop in section.properties]
    for prop, junit in properties:
        report.user_properties.append(prop)
        if junit:
            item.user_properties.append(prop)  # junitxml writes the teardown report's, which copies the item's


def _fail(report: pytest.TestReport, reasons: list[FailureReason]) -> None:
    """Fail a passing ``report`` with the first reason's message; later reasons add their detail beneath."""
    for reason in reasons:
        if report.passed:
            report.outcome = "failed"
            report.longrepr = reason.text
        elif reason.detail and isinstance(report.longrepr, str):
            report.longrepr = f"{report.longrepr}\n{reason.detail}"
        elif reason.detail and hasattr(report.longrepr, "addsection"):
            report.longrepr.addsection(reason.title or f"gpuperf {reason.source}", reason.detail)  # type: ignore[union-attr]


def _unmeasured(item: pytest.Item) -> str:
    """Why a passed perf test that reported no verdict judged nothing ('' when it is no perf test, or measured
    elsewhere: a distributed test's ranks, pytest-benchmark's fixture)."""
    names = getattr(item, "fixturenames", ())
    handle = getattr(item, "funcargs", {}).get("gpuperf")
    measured = handle is not None and bool(handle.metrics or handle.measurements)
    if measured or item.get_closest_marker("gpuperf_distributed"):
        return ""
    if "gpuperf" in names:
        return (
            f"{item.nodeid} uses the gpuperf fixture but never called gpuperf.measure() or gpuperf.record(): "
            "nothing was measured or judged"
        )
    if item.get_closest_marker("gpuperf") is not None and "benchmark" not in names:
        return (
            f"{item.nodeid} is marked @pytest.mark.gpuperf but does not use the gpuperf fixture: nothing was measured "
            "or judged; take the gpuperf fixture and call gpuperf.measure(step)"
        )
    return ""


def _times_on_host_cpu(item: pytest.Item) -> bool:
    """True for a perf test instance whose backend is the host CPU (cpu, or a CPU Vulkan adapter such as lavapipe)."""
    callspec = getattr(item, "callspec", None)
    name = callspec.params.get("gpuperf_backend") if callspec is not None else None
    if not isinstance(name, str) or any(mark.name == "skip" for mark in item.iter_markers()):
        return False
    from pytest_gpuperf.backends import get_backend

    try:
        return bool(get_backend(name).is_host_cpu())
    except Exception:  # noqa: BLE001 - a backend that cannot answer is measured lazily by its first test
        return False


def call_params(item: pytest.Item) -> dict[str, Any] | None:
    """The test's parametrize values (JSON scalars as they are, anything else as its ``str``), or None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    return {
        name: value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
        for name, value in callspec.params.items()
    }
