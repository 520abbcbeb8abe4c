"""What a feature gets about one ``measure()`` call (see :mod:`pytest_gpuperf.hookspecs`).

A feature plugin implements :func:`~pytest_gpuperf.hookspecs.pytest_gpuperf_after_measure`;
after the core timed a step and took its peak memory, every implementation receives a
:class:`MeasureContext` and returns extra metrics, which are judged and stored like the
core's own. Features never touch the session: baseline questions go to ``context.judging``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.results import Metric
    from pytest_gpuperf.settings import Settings
    from pytest_gpuperf.timing import TimingResult


class PerfSession(Protocol):
    """What a feature may read of the active ``--gpuperf`` session (``session.GpuperfSession``, found under
    ``keys.SESSION_KEY``): its settings and its judging service. Features type the session by this, never by the
    hook layer's class."""

    settings: Settings
    judging: Judging


@dataclass
class MeasureContext:
    """Everything a feature may need about one ``measure()`` call (``test``: its backend, node id and options)."""

    test: TestContext
    step: Callable[[], object]
    name: str
    timing: TimingResult
    metrics: list[Metric]
    judging: Judging
    hints: dict[str, Any] = field(default_factory=dict)

    def baseline_value(self, metric_name: str) -> Any:
        """The recorded value of one of this test's metrics (None when recording or without a baseline)."""
        entry = self.judging.entry(self.test, metric_name)
        return entry.get("value") if entry else None

    def recorded_value(self, metric_name: str) -> Any:
        """The value the baseline file holds for one of this test's metrics, also under ``--gpuperf-update``.

        A re-record classifies a step near a class boundary as the file does (the hysteresis the judge applies),
        so an unchanged re-record leaves the line as it is; None under ``gpuperf_update_all`` or without one.
        """
        entry = self.judging.stored_entry(self.test, metric_name)
        return entry.get("value") if entry else None


#: The narrow callable a :class:`~pytest_gpuperf.fixture.GpuPerf` calls after timing (the hook, or nothing).
AfterMeasure = Callable[[MeasureContext], list["Metric"]]
#: What it asks before timing: did a feature run the step in place of measuring it (the hook, or nothing)?
MeasureInstead = Callable[["TestContext", Callable[[], object], str], bool]
