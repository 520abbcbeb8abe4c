"""The plan of one ``gpuperf.measure()`` call: everything decided before the step runs, computed once.

The judged timing metric (throughput when ``items=`` is given, else time:
:func:`pytest_gpuperf.judging.service.judged_timing_metric`, asked here and nowhere else), its baseline entry and
tolerance (asked of the judging service), the stop rule (:mod:`pytest_gpuperf.judging.stop_rule`), the timing
loop's settings and the host calibration. Every later stage reads the plan; a confirmation times the step again
with the same plan.

A run must be timed the way its baseline was, or the comparison is between two different things: the plan
reuses the baseline's timing method (CUDA graph or event loops; thread CPU time or wall time) when the entry
names it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.judging.stop_rule import StopRule
    from pytest_gpuperf.timing import MeasureConfig
    from pytest_gpuperf.timing.calibration import Calibration


@dataclass(frozen=True)
class MeasureCall:
    """The arguments of one ``gpuperf.measure()`` call (checked by the fixture)."""

    name: str
    items: float | None = None
    unit: str = "items"
    flops: float | None = None
    bytes_moved: float | None = None
    memory: bool = True

    def hints(self) -> dict[str, Any]:
        """What the count hooks get about the step's work (``MeasureContext.hints``)."""
        return {"items": self.items, "unit": self.unit, "flops": self.flops, "bytes_moved": self.bytes_moved}


@dataclass(frozen=True)
class MeasurePlan:
    """How one step is measured and judged (module doc); read-only, ``entry`` included."""

    call: MeasureCall
    #: Name and kind of the judged timing metric (``step.time`` / ``time``, ``step.throughput`` / ``throughput``).
    judged: str
    kind: str
    #: Its baseline entry (None when recording or absent) and tolerance.
    entry: dict[str, Any] | None
    tolerance: float
    #: The timing loop's settings (timed like the baseline) and the stop rule from the entry.
    config: MeasureConfig
    stop_rule: StopRule | None
    #: This process's host calibration (host-CPU backends; None on a GPU), carried by the timing metrics.
    calibration: Calibration | None = None

    def recalibrated(self, calibration: Calibration) -> MeasurePlan:
        """The same plan, its timing metrics carrying ``calibration`` (measured again before a confirmation)."""
        return replace(self, calibration=calibration)


#: The ``method`` values a CUDA timing stores, and those a host-CPU timing stores: an entry's method is followed
#: only by a clock it can name (a ``cuda_graph`` entry never switches a CPU run to the wall clock).
GPU_METHODS = ("cuda_graph", "events", "cupti")
CPU_METHODS = ("thread_cpu", "wall", "events")


def timed_like(entry: dict[str, Any] | None, config: MeasureConfig) -> MeasureConfig:
    """``config`` with the entry's timing method where the settings leave it to ``auto`` (and no L2 flush)."""
    if entry and "method" in entry and not config.l2_flush:
        method = str(entry["method"])
        if config.cuda_graph == "auto" and method in GPU_METHODS:
            config = replace(config, cuda_graph="on" if method == "cuda_graph" else "off")
        if config.cpu_clock == "auto" and method in CPU_METHODS:
            thread = method == "thread_cpu"
            # a step that now waits leaves the baseline's thread clock for the wall clock (added waiting counts)
            config = replace(config, cpu_clock="thread" if thread else "wall", wall_when_waiting=thread)
    return config


def plan_measure(
    context: TestContext,
    judging: Judging,
    config: MeasureConfig,
    call: MeasureCall,
    calibration: Calibration | None = None,
) -> MeasurePlan:
    """The plan of ``call`` for the test ``context``: one entry lookup, one tolerance, one stop rule."""
    from pytest_gpuperf.judging.service import judged_timing_metric
    from pytest_gpuperf.judging.stop_rule import stop_rule_for

    judged, kind = judged_timing_metric(call.name, call.items)
    entry = judging.entry(context, judged)
    tolerance = judging.tolerance(context, judged, kind)
    stop_rule = stop_rule_for(entry, tolerance, call.items)
    config = timed_like(entry, config)
    scope = context.backend.wait_scope()
    if scope != config.wait_scope:
        config = replace(config, wait_scope=scope)
    return MeasurePlan(call, judged, kind, entry, tolerance, config, stop_rule, calibration)
