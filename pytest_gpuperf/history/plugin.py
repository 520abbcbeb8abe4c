"""The history feature inside a pytest run: ``--gpuperf-bisect`` exit codes and the opt-in creep check.

* ``--gpuperf-bisect``: the run's exit status is 0 / 1 / 125 for ``git bisect run`` (:mod:`.bisect`).
* ``gpuperf_creep_check = true`` (ini): a judged time, throughput or peak memory that has drifted past the creep
  tolerance from its first accepted baseline in git (or its value at ``gpuperf_creep_since``) fails the test,
  even when every accepted update stayed inside the metric's tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.settings import add_options, get_option

if TYPE_CHECKING:
    from pytest_gpuperf.history.series import Series
    from pytest_gpuperf.hookspecs import FailureReason
    from pytest_gpuperf.results import Verdict

HISTORY_OPTIONS: list[tuple[Any, ...]] = [
    (
        "--gpuperf-bisect",
        "bool",
        False,
        "exit 0 when every perf verdict passed, 1 on a regression, 125 (git bisect's skip) when a verdict is "
        "inconclusive or the run cannot judge: for `git bisect run pytest --gpuperf --gpuperf-bisect ...`",
    ),
    (
        "gpuperf_creep_check",
        "bool",
        False,
        "fail a test whose judged time/throughput/peak memory drifted past the creep tolerance since its first "
        "accepted baseline in git (slow creep through updates that each stayed inside the tolerance)",
        {"section": "baselines"},
    ),
    (
        "gpuperf_creep_tolerance",
        "float",
        0.0,
        "drift allowed by gpuperf_creep_check and `gpuperf history` (0: twice the metric's tolerance)",
        {"section": "baselines", "minimum": 0, "metavar": "FRACTION"},
    ),
    (
        "gpuperf_creep_since",
        "str",
        "",
        "git revision whose baselines are the creep reference (default: each entry's first accepted value)",
        {"section": "baselines", "metavar": "REV"},
    ),
]
BISECT_NAME = "gpuperf-bisect"
CREEP_NAME = "gpuperf-creep"
#: Metric kinds the creep check follows.
CREEP_KINDS = frozenset({"time", "throughput", "memory"})


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--gpuperf-bisect`` and the creep check's ini keys."""
    add_options(parser, HISTORY_OPTIONS, "baselines")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register the bisect exit under ``--gpuperf-bisect``; the creep check when asked for (judging runs only)."""
    if get_option(config, "--gpuperf-bisect"):
        from pytest_gpuperf.history.bisect import BisectExit

        config.pluginmanager.register(BisectExit(), BISECT_NAME)
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and not session.settings.update and get_option(config, "gpuperf_creep_check"):
        config.pluginmanager.register(CreepCheck(config), CREEP_NAME)


class CreepCheck:
    """Fails a test whose measured value drifted past the creep tolerance from its git history's reference."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tolerance = float(get_option(config, "gpuperf_creep_tolerance") or 0.0)
        self.since = str(get_option(config, "gpuperf_creep_since") or "") or None
        self._series: dict[tuple[str, str, str], Series] | None = None
        self.problem = ""

    def series(self) -> dict[tuple[str, str, str], Series]:
        """The accepted baselines' series by (device, test, metric), read from git once per session."""
        if self._series is None:
            from pytest_gpuperf.history.series import HistoryError, baseline_series

            session = self.config.stash[SESSION_KEY]
            try:
                found = baseline_series(session.settings.baselines_dir, self.since)
            except HistoryError as exc:
                self.problem = str(exc)
                found = []
            self._series = {s.key: s for s in found}
        return self._series

    def pytest_gpuperf_failure_reasons(self, item: pytest.Item, verdicts: list[Verdict]) -> list[FailureReason]:
        """A reason per judged metric that crept past the tolerance."""
        from pathlib import Path

        from pytest_gpuperf.hookspecs import FailureReason

        judged = [v for v in verdicts if v.metric.kind in CREEP_KINDS and v.baseline is not None]
        if not judged:
            return []
        session = self.config.stash[SESSION_KEY]
        device = Path(str(session.judging.report_context(item.nodeid).get("baseline_file", ""))).stem
        lines = [line for v in judged if (line := self._crept(device, item.nodeid, v))]
        if not lines:
            return []
        return [FailureReason("history", "\n".join(lines), "\n".join(lines), "gpuperf creep")]

    def _crept(self, device: str, node_id: str, verdict: Verdict) -> str:
        """The failure line of one metric that crept, or ''."""
        from pytest_gpuperf.history.analysis import Finding, default_tolerance
        from pytest_gpuperf.history.render import short
        from pytest_gpuperf.history.series import Point

        series = self.series().get((device, node_id, verdict.metric.name))
        value = verdict.metric.value
        if series is None or not series.points or not isinstance(value, (int, float)):
            return ""
        tolerance = default_tolerance(series) if verdict.tolerance is None else verdict.tolerance
        limit = self.tolerance or 2 * (tolerance or 0.0)
        now = Point("this run", "", float(value))
        finding = Finding(series, [], None, limit)
        first = series.points[0]
        finding.drift = now.value / first.value - 1.0 if first.value else None
        if not limit or not finding.creeping:
            return ""
        return (
            f"{verdict.metric.name} crept {finding.drift:+.1%} since {short(first.commit)} "
            f"({first.value:.4g} -> {now.value:.4g} {series.unit}, {len(series.points)} accepted value(s) in git) "
            f"past the creep tolerance {limit:.0%}; `gpuperf history -k '{node_id}'` shows the steps"
        )
