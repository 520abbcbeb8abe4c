"""The metrics one timed step yields: time, throughput, CUDA cycles and host overhead, host syncs, rates.

The time stage's output as :class:`~pytest_gpuperf.results.Metric` objects, ready to be counted and judged; which
timing metric is judged (time, or throughput when ``items=`` is given) is the caller's (the judging service's) word.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_gpuperf.results import KIND_CUSTOM, KIND_CYCLES, KIND_HOST, KIND_THROUGHPUT, KIND_TIME, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.timing.sampling import TimingResult


def timing_metrics(
    name: str,
    timing: TimingResult,
    items: float | None,
    unit: str,
    flops: float | None,
    bytes_moved: float | None,
    judged: str,
) -> list[Metric]:
    """The metrics of one timed step: time and throughput (``judged`` names the one judged), CUDA cycles and host
    overhead, and the FLOP rate and bandwidth when ``flops`` / ``bytes_moved`` per step are known."""
    typical = timing.typical  # the judged statistic (a low quantile, see stats.STAT_QUANTILE)
    extra: dict[str, Any] = timing.summary()
    time_name = f"{name}.time"
    metrics = [
        Metric(
            time_name,
            typical,
            "s",
            "lower",
            KIND_TIME,
            samples=list(timing.samples),
            judged=judged == time_name,
            extra=extra,
        )
    ]
    if items is not None:
        metrics.append(
            Metric(
                f"{name}.throughput",
                items / typical,
                f"{unit}/s",
                "higher",
                KIND_THROUGHPUT,
                samples=[items / s for s in timing.samples if s > 0],
                judged=judged == f"{name}.throughput",
                extra=dict(extra),
            )
        )
    metrics += _clock_metrics(name, timing, extra)
    if flops:
        metrics.append(Metric(f"{name}.flop_rate", flops / typical, "FLOP/s", "higher", KIND_CUSTOM, judged=False))
    if bytes_moved:
        metrics.append(Metric(f"{name}.bandwidth", bytes_moved / typical, "B/s", "higher", KIND_CUSTOM, judged=False))
    return metrics


#: A host-overhead change smaller than this share of the step's eager time is never a regression.
HOST_SLACK_SHARE = 0.05


def _clock_metrics(name: str, timing: TimingResult, extra: dict[str, Any]) -> list[Metric]:
    """CUDA: cycles per step (judged when the SM clock moved, :mod:`.judging.clock_rule`) and host overhead."""
    from pytest_gpuperf.stats import STAT_QUANTILE, quantile

    out = []
    cycles = timing.cycles_samples
    if cycles:
        facts = {k: extra[k] for k in ("sm_clock_mhz", "mem_clock_mhz", "method") if k in extra}
        out.append(
            Metric(
                f"{name}.cycles",
                round(quantile(cycles, STAT_QUANTILE)),
                "cycles",
                "lower",
                KIND_CYCLES,
                samples=cycles,
                judged=False,
                extra=facts,
            )
        )
    host = timing.host_overhead_samples
    eager = timing.eager_time
    if host and eager:
        # A change smaller than HOST_SLACK_SHARE of the step's eager time is never a regression: a device-bound
        # step hides its host work behind the device, so its overhead is a small, noisy difference.
        slack = HOST_SLACK_SHARE * eager
        out.append(
            Metric(
                f"{name}.host_overhead",
                quantile(host, 0.5),
                "s",
                "lower",
                KIND_HOST,
                samples=host,
                extra={"eager_time": eager, "abs_slack": slack, "host_bound": timing.host_bound},
            )
        )
    return out


def host_sync_metrics(name: str, syncs: int | None) -> list[Metric]:
    """``<name>.host_syncs``: host-device synchronizations per step, compared exactly (a new one fails)."""
    if syncs is None:
        return []
    extra = {
        "note": "synchronizing CUDA operations in one step",
        "regression_hint": (
            "a new host-device synchronization per step, host overhead the device cannot hide "
            "(torch.cuda.set_sync_debug_mode('warn') names each one)"
        ),
    }
    return [Metric(f"{name}.host_syncs", syncs, "", "lower", KIND_CUSTOM, tolerance=0.0, extra=extra)]
