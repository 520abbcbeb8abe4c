"""A metric's tolerance and whether it is judged at all, from the test's marker and the run's settings.

Marker per metric (``tolerances={name: ...}``), marker per kind (``time_tolerance``, ``memory_tolerance``,
``host_tolerance``, ``tolerance``), then the ini default; ``informational=`` names metrics recorded and shown
but never failing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_gpuperf.results import KIND_HOST, KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings


def tolerance(settings: Settings, context: TestContext, metric_name: str, kind: str) -> float:
    """Tolerance of one metric: marker per metric, marker per kind, then the ini default.

    A marker value may be a number or a mapping from backend name to number
    (``time_tolerance={"cuda": 0.15}``); backends it does not name get the default.
    """
    per_metric = context.options.get("tolerances") or {}
    if metric_name in per_metric:
        return float(per_metric[metric_name])

    def pick(key: str, default: float) -> float:
        value = context.option(key, default)
        return float(default if value is None else value)

    if kind == KIND_MEMORY:
        return pick("memory_tolerance", pick("tolerance", settings.memory_tolerance))
    if kind == KIND_HOST:
        return pick("host_tolerance", settings.host_tolerance)
    if kind in (KIND_TIME, KIND_THROUGHPUT):
        return pick("time_tolerance", pick("tolerance", settings.time_tolerance_for(context.backend)))
    return pick("tolerance", settings.time_tolerance)


def metric_tolerance(settings: Settings, context: TestContext, metric: Metric) -> float:
    """A metric's own tolerance (set by whoever built it) wins over the marker's per-kind one."""
    per_metric = context.options.get("tolerances") or {}
    if metric.tolerance is not None and metric.name not in per_metric:
        return metric.tolerance
    return tolerance(settings, context, metric.name, metric.kind)


def informational(context: TestContext) -> set[str]:
    """Metrics recorded and shown but never failing, from ``@pytest.mark.gpuperf(informational=...)``.

    Names are full (``step.throughput``) or short (``throughput``, ``bound``); a mapping per
    backend (``informational={"cuda": ("throughput", "bound")}``) applies to the backends it names.
    """
    value = context.option("informational") or ()
    if isinstance(value, str):
        value = (value,)
    return {str(name) for name in value}
