"""The active ``--gpuperf`` session's pytest hooks: verdicts onto reports, failures.

Registered by :mod:`pytest_gpuperf.plugin` only when ``--gpuperf`` (or
``--gpuperf-update``) is given, so a plain pytest run never pays for it. Everything
about baselines and verdicts lives in the judging service (:mod:`pytest_gpuperf.judging`);
this module only relays pytest's hooks to it and to the reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.judging import FileBaselines, Judging, metric_to_entry  # noqa: F401 - metric_to_entry re-exported
from pytest_gpuperf.results import REPORT_ATTR, verdict_to_dict

if TYPE_CHECKING:
    from pytest_gpuperf.settings import Settings


class GpuperfSession:
    """The judging service of this run plus what the reports read (updates: :mod:`pytest_gpuperf.baselines.plugin`)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings

        def ref_loader() -> Any:
            return config.hook.pytest_gpuperf_baseline_loader(config=config)

        self.judging = Judging(settings, FileBaselines(settings, ref_loader))
        self.reported: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []

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
        setattr(report, REPORT_ATTR, {"verdicts": payload, **self.judging.report_context(item.nodeid)})
        for verdict in verdicts:
            value = f"{verdict.metric.value} {verdict.metric.unit}".strip()
            prop = (f"gpuperf.{verdict.metric.name}", f"{value} [{verdict.status}]")
            report.user_properties.append(prop)
            item.user_properties.append(prop)  # junitxml writes the teardown report's, which copies the item's
        failures = self.judging.failure_lines(item.nodeid)
        if failures and report.passed:
            from pytest_gpuperf.reporting.terminal import failure_longrepr  # first line: the short fact

            report.outcome = "failed"
            report.longrepr = failure_longrepr(item.nodeid, payload, failures)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect verdicts from reports (also those coming back from xdist workers)."""
        data = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            self.reported.append((report.nodeid, data, data.get("verdicts", [])))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The per-test metric table: baseline, measured, change, verdict."""
        from pytest_gpuperf.reporting.terminal import write_terminal_summary

        write_terminal_summary(terminalreporter, self, self.settings)
