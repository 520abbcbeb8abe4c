"""What a series says: its change points (near which commit, how large, how sure) and its drift (slow creep).

Drift is the change from a series' first point (the reference: the first accepted value, or the value at
``--since``) to its last. A series creeps when its drift is worse than the creep tolerance, even if every single
update stayed inside the metric's tolerance: two +4% steps pass a 5% gate each and add up to +8%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_gpuperf.history.changepoints import DEFAULT_ALPHA, ChangePoint, find_change_points
from pytest_gpuperf.history.series import Point, Series

#: The metric tolerances the gate uses by default (the ini keys gpuperf_time_tolerance,
#: gpuperf_cpu_time_tolerance, gpuperf_memory_tolerance); creep defaults to twice the metric's.
GPU_TIME_TOLERANCE = 0.05
CPU_TIME_TOLERANCE = 0.25
MEMORY_TOLERANCE = 0.05
#: Kinds whose value follows the step's speed.
TIMED_KINDS = frozenset({"time", "throughput", "cycles"})


def default_tolerance(series: Series) -> float | None:
    """The gate's default tolerance for ``series``'s metric (None for counts and categories: judged exactly)."""
    if series.kind in TIMED_KINDS:
        return CPU_TIME_TOLERANCE if series.device.startswith("cpu-") else GPU_TIME_TOLERANCE
    if series.kind == "memory":
        return MEMORY_TOLERANCE
    return None


@dataclass(frozen=True)
class Step:
    """A change point placed on commits."""

    point: ChangePoint
    commit: str
    earliest: str
    latest: str


@dataclass
class Finding:
    """One series with its change points and drift."""

    series: Series
    steps: list[Step] = field(default_factory=list)
    drift: float | None = None
    creep_tolerance: float | None = None

    @property
    def creeping(self) -> bool:
        """True when the drift is worse than the creep tolerance in the metric's bad direction."""
        if self.drift is None or self.creep_tolerance is None:
            return False
        better = self.series.better
        if better == "higher":
            return self.drift < -self.creep_tolerance
        if better == "lower":
            return self.drift > self.creep_tolerance
        return abs(self.drift) > self.creep_tolerance


def drift(points: list[Point]) -> float | None:
    """Last value over the first, minus one (None with fewer than two points or a zero reference)."""
    if len(points) < 2 or points[0].value == 0:
        return None
    return points[-1].value / points[0].value - 1.0


def analyse(
    series: Series, *, alpha: float = DEFAULT_ALPHA, min_change: float = 0.0, creep: float | None = None
) -> Finding:
    """Change points and drift of ``series``; ``creep`` overrides twice the metric's default tolerance."""
    values = [point.value for point in series.points]
    points = series.points
    steps = [
        Step(cp, points[cp.index].commit, points[cp.earliest].commit, points[cp.latest].commit)
        for cp in find_change_points(values, alpha=alpha, min_change=min_change)
    ]
    tolerance = default_tolerance(series)
    limit = creep if creep is not None else (2 * tolerance if tolerance is not None else None)
    return Finding(series, steps, drift(points), limit)
