"""Per-rank metrics -> the metrics judged for the whole world.

Every rank's metric is kept under ``rank<N>.`` (``rank1.step.peak_memory``);
per-rank peak memory and recorded metrics are judged, per-rank times and
throughputs are informational. For each measured step the *slowest* rank gives
``<step>.time`` / ``<step>.throughput`` (judged, with that rank's samples), and
``<step>.imbalance`` = slowest median time / fastest median time (1.0 = balanced).
"""

from __future__ import annotations

from dataclasses import replace

from pytest_gpuperf.results import KIND_CUSTOM, KIND_THROUGHPUT, KIND_TIME, Metric


def rank_metrics(per_rank: dict[int, list[Metric]]) -> list[Metric]:
    """Every rank's metrics renamed ``rank<N>.<name>``; per-rank time and throughput are not judged."""
    out = []
    for rank in sorted(per_rank):
        for metric in per_rank[rank]:
            judged = metric.judged and metric.kind not in (KIND_TIME, KIND_THROUGHPUT)
            out.append(replace(metric, name=f"rank{rank}.{metric.name}", judged=judged, extra=dict(metric.extra)))
    return out


def world_metrics(per_rank: dict[int, list[Metric]], imbalance_tolerance: float | None = None) -> list[Metric]:
    """The slowest rank's time/throughput per step and the step's imbalance between ranks."""
    steps: list[str] = []
    for metrics in per_rank.values():
        for metric in metrics:
            if metric.kind == KIND_TIME and metric.name.endswith(".time"):
                step = metric.name[: -len(".time")]
                if step not in steps:
                    steps.append(step)
    out: list[Metric] = []
    for step in steps:
        times = {
            rank: m
            for rank, metrics in per_rank.items()
            for m in metrics
            if m.name == f"{step}.time" and m.kind == KIND_TIME
        }
        slow_rank = max(times, key=lambda r: float(times[r].value))
        fast_rank = min(times, key=lambda r: float(times[r].value))
        for metric in per_rank[slow_rank]:  # with its cycles, host overhead and syncs (the clock rule reads them)
            if metric.name in (
                f"{step}.{last}" for last in ("time", "throughput", "cycles", "host_overhead", "host_syncs")
            ):
                out.append(replace(metric, extra={**metric.extra, "rank": slow_rank}))
        slow, fast = float(times[slow_rank].value), float(times[fast_rank].value)
        out.append(
            Metric(
                f"{step}.imbalance",
                slow / fast if fast > 0 else 1.0,
                "x",
                "lower",
                KIND_CUSTOM,
                tolerance=imbalance_tolerance,
                extra={"slowest_rank": slow_rank, "fastest_rank": fast_rank},
            )
        )
    return out


def aggregate(per_rank: dict[int, list[Metric]], imbalance_tolerance: float | None = None) -> list[Metric]:
    """All metrics of one distributed test, ready for the session to judge."""
    return rank_metrics(per_rank) + world_metrics(per_rank, imbalance_tolerance)
