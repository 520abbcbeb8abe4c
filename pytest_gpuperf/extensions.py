"""The extension point through which feature modules add metrics to a ``measure()`` call.

A feature (roofline verdicts, torch.profiler capture, Nsight Compute capture ...)
registers an object on the active session in its own ``pytest_configure``::

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.extensions.append(MyExtension())

After the core has timed a step and taken its peak memory, each extension's
``after_measure`` is called in registration order and returns extra metrics,
which are judged and stored like the core's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.measure import TimingResult
    from pytest_gpuperf.results import Metric


@dataclass
class MeasureContext:
    """Everything an extension may need about one ``measure()`` call."""

    handle: GpuPerf
    step: Callable[[], object]
    name: str
    timing: TimingResult
    metrics: list[Metric]
    hints: dict[str, Any] = field(default_factory=dict)


class MeasureExtension(Protocol):
    """Adds metrics (and artifacts) after the core measured a step."""

    def after_measure(self, context: MeasureContext) -> list[Metric]:
        """Return extra metrics for this step (may be empty)."""
        ...
