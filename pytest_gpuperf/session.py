"""The active ``--gpuperf`` session's pytest hooks: verdicts onto reports, failures.

Registered by :mod:`pytest_gpuperf.plugin` only when ``--gpuperf`` (or
``--gpuperf-update``) is given, so a plain pytest run never pays for it. Everything
about baselines and verdicts lives in the judging service (:mod:`pytest_gpuperf.judging.service`);
this module only relays pytest's hooks to it and to the reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.judging.service import Judging
from pytest_gpuperf.results import REPORT_ATTR, verdict_to_dict

#: The plugin an A/B worker process loads (``pytest_gpuperf.ab.runner.WORKER_MODULE``).
AB_WORKER_PLUGIN = "_gpuperf_ab_worker"

if TYPE_CHECKING:
    from pytest_gpuperf.settings import Settings


class GpuperfSession:
    """The judging service of this run plus what the reports read (updates: :mod:`pytest_gpuperf.baselines.plugin`)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings

        def ref_loader() -> Any:
            return config.hook.pytest_gpuperf_baseline_loader(config=config)

        from pytest_gpuperf.baselines.recording import choose_sink
        from pytest_gpuperf.baselines.sources import FileBaselines

        # The sink is chosen once, here: the gate, or the recorder under --gpuperf-update.
        self.judging = Judging(settings, FileBaselines(settings, ref_loader), choose_sink(config, settings))
        self.reported: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Measure the host CPU's calibration once, before any test runs, when a selected test times on it."""
        from pytest_gpuperf.timing import calibration

        ab = self.config.pluginmanager.has_plugin(AB_WORKER_PLUGIN) or self.config.getoption("gpuperf_ab", None)
        calibration.set_enabled(not ab)  # A/B judges both sides on this machine: no stored time is compared
        if not ab and any(_times_on_host_cpu(item) for item in session.items):
            try:
                calibration.process_calibration()
            except ValueError as exc:  # a malformed pinned value (calibration.PIN_ENV)
                raise pytest.UsageError(str(exc)) from None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        """After a passing body: replicate it in fresh processes (recording) or confirm a suspect; then warn."""
        outcome = yield
        node_id = item.nodeid
        if outcome.excinfo is None and node_id in self.judging.contexts:
            from pytest_gpuperf.judging.replication import can_replicate

            if can_replicate(item):
                self._replicate(item)
        from pytest_gpuperf.results import GpuperfWarning

        for line in self.judging.warnings_for(node_id):
            item.warn(GpuperfWarning(line))  # shown at the test's file and line, as pytest's own warnings are

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
        """Fail the test's call phase when one of its metrics regressed; attach verdicts to the report."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when != "call":
            return
        verdicts = self.judging.verdicts.get(item.nodeid)
        if not verdicts:
            return
        payload = [verdict_to_dict(v) for v in verdicts]
        context = {"verdicts": payload, "params": call_params(item), **self.judging.report_context(item.nodeid)}
        setattr(report, REPORT_ATTR, context)
        for verdict in verdicts:
            value = f"{verdict.metric.value} {verdict.metric.unit}".strip()
            prop = (f"gpuperf.{verdict.metric.name}", f"{value} [{verdict.status}]")
            report.user_properties.append(prop)
            item.user_properties.append(prop)  # junitxml writes the teardown report's, which copies the item's
        for verdict in verdicts:
            if verdict.status == "inconclusive":
                prop = (f"gpuperf.{verdict.metric.name}.inconclusive", verdict.message)
                report.user_properties.append(prop)
                item.user_properties.append(prop)
        failures = self.judging.failure_lines(item.nodeid)
        if failures and report.passed:
            from pytest_gpuperf.reporting.terminal import failure_longrepr  # first line: the short fact

            report.outcome = "failed"
            report.longrepr = failure_longrepr(item.nodeid, payload, failures)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect verdicts from reports (also those coming back from xdist workers)."""
        data = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            self.reported.append((report.nodeid, {**data, "outcome": report.outcome}, data.get("verdicts", [])))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The per-test metric table: baseline, measured, change, verdict."""
        from pytest_gpuperf.reporting.terminal import write_terminal_summary

        write_terminal_summary(terminalreporter, self, self.settings)


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
