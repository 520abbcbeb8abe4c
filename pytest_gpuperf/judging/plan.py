"""Plan one ``gpuperf.measure()`` call: timing method and stop rule, from the judged metric's baseline entry.

A run must be timed the way its baseline was, or the comparison is between two
different things: the plan reuses the baseline's timing method (CUDA graph or event
loops; thread CPU time or wall time) when the baseline names it. The stop rule
(:mod:`pytest_gpuperf.judging.stop_rule`) comes from the judged metric's baseline entry and
tolerance, both asked of the judging service.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_gpuperf.judging.service import judged_timing_metric

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.judging.stop_rule import StopRule
    from pytest_gpuperf.timing import MeasureConfig


@dataclass(frozen=True)
class MeasurePlan:
    """How to time one step: the loop's settings and the judged metric's stop rule."""

    config: MeasureConfig
    stop_rule: StopRule | None


def plan_measure(
    context: TestContext, judging: Judging, config: MeasureConfig, name: str, items: float | None
) -> MeasurePlan:
    """Choose timing method and stop rule for step ``name`` (see module docstring)."""
    from pytest_gpuperf.judging.stop_rule import stop_rule_for

    judged, kind = judged_timing_metric(name, items)
    entry = judging.entry(context, judged)
    if entry and "method" in entry and not config.l2_flush:
        method = str(entry["method"])
        if config.cuda_graph == "auto":
            config = replace(config, cuda_graph="on" if method == "cuda_graph" else "off")
        if config.cpu_clock == "auto":
            config = replace(config, cpu_clock="thread" if method == "thread_cpu" else "wall")
    tolerance = judging.tolerance(context, judged, kind)
    return MeasurePlan(config, stop_rule_for(entry, tolerance, items))
