"""Plan one ``gpuperf.measure()`` call: drift probe, timing method and stop rule, from the baseline.

A run must be timed the way its baseline was, or the comparison is between two
different things: the plan reuses the baseline's drift probe and its timing
method (CUDA graph or event loops; thread CPU time or wall time) when the baseline names them, and otherwise
picks the same-kind probe for the step (:mod:`pytest_gpuperf.reference`). The
stop rule (:mod:`pytest_gpuperf.decision`) comes from the judged metric's
baseline entry and tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.decision import StopRule
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.measure import MeasureConfig
    from pytest_gpuperf.reference import Probe


@dataclass
class MeasurePlan:
    """How to time one step: loop settings, drift probe and stop rule."""

    config: MeasureConfig
    probe: Probe | None
    stop_rule: StopRule | None


def baseline_entry(handle: GpuPerf, metric_name: str) -> dict[str, Any] | None:
    """The baseline entry of ``metric_name`` for this test on this hardware (None when recording or absent)."""
    session = handle.session
    if session is None or session.settings.update:
        return None
    baseline = session.baseline_for(session.fingerprint_for(handle.backend))
    if baseline is None:
        return None
    return (baseline.tests.get(handle.node_id) or {}).get(metric_name)


def _quick_seconds(handle: GpuPerf, step: Callable[[], object]) -> float:
    """Best of three single calls (after one warm-up): enough to tell compute- from memory-bound."""
    handle.backend.time_block(step, 1)
    return min(handle.backend.time_block(step, 1) for _ in range(3))


def plan_measure(
    handle: GpuPerf,
    step: Callable[[], object],
    config: MeasureConfig,
    name: str,
    items: float | None,
    flops: float | None,
    bytes_moved: float | None,
) -> MeasurePlan:
    """Choose probe, timing method and stop rule for ``step`` (see module docstring)."""
    from pytest_gpuperf.decision import stop_rule_for

    session = handle.session
    assert session is not None
    judged = f"{name}.time" if items is None else f"{name}.throughput"
    entry = baseline_entry(handle, judged)
    probe = None
    probes = session.probes_for(handle.backend) if config.use_reference else None
    if probes is not None and probes.probes:
        wanted = str(entry.get("reference", "")) if entry else ""
        probe = probes.get(wanted) if wanted else None
        if probe is None:
            probe = probes.choose(_quick_seconds(handle, step), flops, bytes_moved, step)
    if entry and "method" in entry and not config.l2_flush:
        method = str(entry["method"])
        if config.cuda_graph == "auto":
            config = replace(config, cuda_graph="on" if method == "cuda_graph" else "off")
        if config.cpu_clock == "auto":
            config = replace(config, cpu_clock="thread" if method == "thread_cpu" else "wall")
    kind = KIND_TIME if items is None else KIND_THROUGHPUT
    tolerance = session.tolerance_for(handle, Metric(judged, 0.0, "", kind=kind))
    rule = stop_rule_for(entry, tolerance, probe.name if probe else "", items)
    return MeasurePlan(config, probe, rule)
