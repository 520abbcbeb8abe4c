"""Hand metrics that came from N ranks to the judging service, under the fingerprint of an N-rank world."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.results import Metric


def mark_world(item: Any, handle: GpuPerf | None, world_size: int) -> None:
    """Make the baseline file of ``item`` the one of a ``world_size``-rank world (``...-ws<N>.yaml``)."""
    from pytest_gpuperf.keys import WORLD_SIZE_KEY

    item.stash[WORLD_SIZE_KEY] = world_size


def judge_world_metrics(item: Any, handle: GpuPerf | None, world_size: int, metrics: list[Metric]) -> None:
    """Judge and store ``metrics`` for ``item`` (nothing in smoke mode); the core's report hook fails regressions."""
    mark_world(item, handle, world_size)
    if handle is None or handle.judging is None or not metrics:
        return
    context = handle.context.in_world(world_size)
    handle.judging.store(context, handle.judging.judge(context, metrics))
    handle.metrics.extend(metrics)


def step_metrics(item: Any, handle: GpuPerf | None, world_size: int, metrics: list[Metric]) -> list[Metric]:
    """What features add to the steps the ranks measured (``pytest_gpuperf_after_world``: ncu's class and table):
    each step named by the world's ``<step>.time``, with the slowest rank's seconds per call; nothing in smoke mode."""
    import re

    from pytest_gpuperf.results import KIND_TIME

    world = [m for m in metrics if not re.match(r"rank\d+\.", m.name)]  # rank<N>.<step>.time: each rank's own
    steps = {m.name[: -len(".time")]: float(m.value) for m in world if m.kind == KIND_TIME and m.name.endswith(".time")}
    if handle is None or handle.judging is None or not steps:
        return []
    context = handle.context.in_world(world_size)
    answers = item.config.hook.pytest_gpuperf_after_world(item=item, context=context, steps=steps)
    return [metric for extra in answers for metric in (extra or [])]


def with_host_calibration(handle: GpuPerf | None, metrics: list[Metric]) -> list[Metric]:
    """A script's timing metrics with this process's host-CPU calibration (the script ran on this host's CPU).

    The script times itself with the wall clock, so its metrics carry the wall-clock calibration
    (:mod:`pytest_gpuperf.timing.calibration`); nothing on a GPU backend or in smoke mode.
    """
    calibration = handle.calibration() if handle is not None and handle.judging is not None else None
    if calibration is not None:
        from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME

        for metric in metrics:
            if metric.kind in (KIND_TIME, KIND_THROUGHPUT) and "calibration" not in metric.extra:
                metric.extra.update(calibration.facts(str(metric.extra.get("method", "wall"))))
    return metrics


def imbalance_tolerance(handle: GpuPerf | None) -> float | None:
    """Imbalance is as noisy as time on this backend: judge it with the backend's time tolerance."""
    if handle is None or handle.judging is None:
        return None
    from pytest_gpuperf.results import KIND_TIME

    return handle.judging.tolerance(handle.context, "imbalance.time", KIND_TIME)


def second_opinion(item: Any, handle: GpuPerf | None, again: Callable[[], dict[str, Metric]]) -> None:
    """Run a whole-process measurement (a script on N ranks) ``again`` where one run cannot be trusted alone.

    Each run of a script is a fresh set of processes, so recording and confirming work as for any test
    (:func:`pytest_gpuperf.judging.replication.second_look`), with another run of the script as the fresh process.
    """
    if handle is None or handle.judging is None:
        return
    from pytest_gpuperf.judging.replication import second_look

    warning = second_look(
        handle.judging, item.nodeid, lambda runs: ([again() for _ in range(runs)], ""), "a second run of the script"
    )
    if warning and hasattr(item, "warn"):
        from pytest_gpuperf.results import GpuperfWarning

        item.warn(GpuperfWarning(warning))
