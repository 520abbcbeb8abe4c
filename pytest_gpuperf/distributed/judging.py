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


def imbalance_tolerance(handle: GpuPerf | None) -> float | None:
    """Imbalance is as noisy as time on this backend: judge it with the backend's time tolerance."""
    if handle is None or handle.judging is None:
        return None
    from pytest_gpuperf.results import KIND_TIME

    return handle.judging.tolerance(handle.context, "imbalance.time", KIND_TIME)


def second_opinion(item: Any, handle: GpuPerf | None, again: Callable[[], dict[str, Metric]]) -> None:
    """Run a whole-process measurement (a script on N ranks) ``again`` where one run cannot be trusted alone.

    Each run of a script is a fresh set of processes, and whole processes are fast or slow, so under
    ``--gpuperf-update`` the baseline comes from ``--gpuperf-processes`` runs (3 on a host CPU) with their
    spread stored; otherwise a suspected time/throughput regression is confirmed by one more run, and a run
    that disagrees makes the verdict inconclusive (:func:`pytest_gpuperf.replication.reconcile`).
    """
    if handle is None or handle.judging is None:
        return
    from pytest_gpuperf.judging import suspects
    from pytest_gpuperf.replication import default_processes

    judging, node_id = handle.judging, item.nodeid
    if judging.settings.update:
        wanted = getattr(judging.settings, "processes", 0) or default_processes(handle.context.backend.is_host_cpu())
        if wanted > 1:
            judging.merge_processes(node_id, [again() for _ in range(wanted - 1)])
    elif judging.settings.confirm and suspects(judging.verdicts.get(node_id, [])):
        context = judging.contexts[node_id]
        judging.verdicts[node_id] = judging.confirm(
            context, judging.verdicts[node_id], again(), where="a second run of the script"
        )
