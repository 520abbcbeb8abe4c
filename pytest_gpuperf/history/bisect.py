"""``--gpuperf-bisect``: an exit status ``git bisect run`` understands.

* 0: every perf test was judged and none regressed (good commit);
* 1: a perf verdict regressed, or a counted quantity changed (bad commit);
* 125: the run could not judge this commit (git bisect's "skip"): a verdict is inconclusive, a test has no
  baseline, a test failed for another reason than its verdicts (a build that does not work), nothing was
  collected, or pytest stopped with an error. A regression anywhere wins over a reason to skip: it is evidence.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

GOOD, BAD, SKIP = 0, 1, 125
#: Verdict statuses that make a commit bad.
BAD_STATUSES = frozenset({"regression", "changed"})
#: Verdict statuses with which a commit cannot be judged.
SKIP_STATUSES = frozenset({"inconclusive", "new"})


def bisect_status(tests: Iterable[tuple[str, list[str]]], pytest_status: int) -> tuple[int, str]:
    """The exit status and its reason from each perf test's (outcome, verdict statuses) and pytest's own status."""
    tests = list(tests)
    bad = [statuses for outcome, statuses in tests if BAD_STATUSES & set(statuses)]
    if bad:
        return BAD, f"{len(bad)} perf test(s) regressed"
    if pytest_status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return SKIP, f"pytest ended with {pytest.ExitCode(pytest_status).name}"
    if not tests:
        return SKIP, "no perf test was judged"
    broken = [1 for outcome, statuses in tests if outcome == "failed"]
    if broken or pytest_status == pytest.ExitCode.TESTS_FAILED:
        return SKIP, "a test failed for another reason than its perf verdicts"
    doubtful = [1 for _, statuses in tests if SKIP_STATUSES & set(statuses)]
    if doubtful:
        return SKIP, f"{len(doubtful)} perf test(s) could not be judged (inconclusive or no baseline)"
    return GOOD, f"{len(tests)} perf test(s) judged, none regressed"


class BisectExit:
    """Collects each test's verdict statuses from the call reports and sets the session's exit status."""

    def __init__(self) -> None:
        self.tests: dict[str, tuple[str, list[str]]] = {}
        self.reason = ""
        self.status = SKIP

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember a test's outcome and verdict statuses (reports from xdist workers too)."""
        from pytest_gpuperf.results import REPORT_ATTR

        data: Any = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            statuses = [str(v.get("status", "")) for v in data.get("verdicts", [])]
            self.tests[report.nodeid] = (report.outcome, statuses)
        elif report.failed and report.nodeid in self.tests:
            self.tests[report.nodeid] = ("failed", self.tests[report.nodeid][1])  # a teardown error

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Replace pytest's exit status by the bisect status."""
        self.status, self.reason = bisect_status(self.tests.values(), int(exitstatus))
        session.exitstatus = self.status

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line: what the exit status will be, and why."""
        terminalreporter.write_line(f"gpuperf bisect: exit {self.status} ({self.reason})")
