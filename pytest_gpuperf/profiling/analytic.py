"""The analytic verdict of one ``measure()`` call: one count, the device's roofs, one classification.

Works on every backend: torch steps are counted once by
:func:`~pytest_gpuperf.profiling.counting.count_step` (``flops=`` / ``bytes_moved=``
hints win over the count); steps of other backends (Vulkan) need both hints. A step
that beats its roof makes the roof be measured again (best of old and new); if it still
beats it, the share is reported as a counting error, never as a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.profiling.counting import StepCount
from pytest_gpuperf.results import KIND_CATEGORY, KIND_CUSTOM, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.profiling.roofline import Roofline, Roofs
    from pytest_gpuperf.profiling.roofs import RoofProvider


ROOFS_NOT_NEEDED = (
    "no bound class: this device's roofs are not measured yet and no verdict of this run needs them (the baseline "
    "has no bound class for the step); --gpuperf-update or @pytest.mark.gpuperf(bound=...) measures them"
)


@dataclass
class AnalyticResult:
    """The count, the classification and the metrics of one step (``line`` is None without a verdict)."""

    count: StepCount | None
    line: Roofline | None
    metrics: list[Metric]
    note: str = ""
    #: Why no verdict was made although one could be (said in the verbose profile, not flagged as a problem).
    skipped: str = ""


def count_for(context: MeasureContext) -> tuple[StepCount | None, str]:
    """FLOPs and bytes of the step: hints first, else one counted call (torch backends); with a note when none."""
    hints = context.hints
    flops_hint, bytes_hint = hints.get("flops"), hints.get("bytes_moved")
    backend = context.test.backend
    if not backend.runs_torch:
        if not (flops_hint and bytes_hint):
            return None, (
                f"no bound verdict: backend {backend.name} runs no torch ops to count; "
                "pass measure(flops=..., bytes_moved=...)"
            )
        return StepCount(float(flops_hint), float(bytes_hint), "float32", "flops= hint", "bytes_moved= hint"), ""
    from pytest_gpuperf.profiling.counting import count_step

    try:
        count = count_step(context.step, backend.synchronize)
    except Exception as exc:  # noqa: BLE001 - any step may refuse to run under a dispatch mode
        if not (flops_hint and bytes_hint):
            return None, f"no bound verdict: counting FLOPs/bytes failed ({type(exc).__name__}: {exc})"
        count = StepCount(0.0, 0.0, "float32")
    if flops_hint:
        count.flops, count.flops_source = float(flops_hint), "flops= hint"
    if bytes_hint:
        count.bytes, count.bytes_source = float(bytes_hint), "bytes_moved= hint"
        # the working set stays the counted one: which tensors the step touches does not depend on the hint
    return count, ""


def step_seconds(timing: Any) -> float:
    """The judged per-step time (the timing loop's ``typical`` statistic; the median on older loops)."""
    typical = getattr(timing, "typical", None)
    return float(typical) if isinstance(typical, (int, float)) and typical > 0 else float(timing.median)


def analytic_verdict(
    context: MeasureContext,
    provider: RoofProvider,
    fingerprint: dict[str, Any],
    latency_share: float | None,
    baseline_bound: str | None,
    need_roofs: bool = True,
) -> AnalyticResult:
    """Count the step once, classify it against the device's roofs, and build its metrics.

    ``need_roofs`` False (no verdict of this run needs the bound class): roofs that are not known yet are not
    measured for it; the step gets no bound class then (``skipped`` says why).
    """
    count, note = count_for(context)
    if count is None:
        return AnalyticResult(None, None, [], note)
    backend = context.test.backend
    if not need_roofs and not provider.cached(backend, fingerprint, count.dtype):
        return AnalyticResult(count, None, [], skipped=ROOFS_NOT_NEEDED)
    roofs, why = _device_roofs(provider, backend, fingerprint, count.dtype)
    if roofs is None:
        return AnalyticResult(count, None, [], why)
    judge = _classifier(count, context.timing, backend, latency_share, baseline_bound)
    line = judge(roofs)
    if line.over_roof:  # a roof measured during a busy moment is too low: measure it again, keep the best
        level = "compute" if line.compute_share >= line.bandwidth_share else line.level
        refreshed = provider.refresh(backend, fingerprint, count.dtype, level)
        if refreshed is not None:
            line = judge(refreshed)
            roofs = refreshed
    return AnalyticResult(count, line, verdict_metrics(context.name, count, line, roofs))


def _device_roofs(provider: RoofProvider, backend: Any, fingerprint: dict[str, Any], dtype: str) -> tuple[Any, str]:
    """The device's roofs for ``dtype``'s class, or None and why there are none."""
    try:
        return provider.roofs(backend, fingerprint, dtype), ""
    except (KeyError, TypeError) as exc:
        why = f"no bound verdict: backend {backend.name} has no measured roofs ({type(exc).__name__}: {exc})"
        if not backend.runs_torch and getattr(backend, "measure_roof", None) is None:
            why += "; a backend that does not run torch measures its own with measure_roof(what, dtype_class, tries)"
        return None, why


def _classifier(
    count: StepCount, timing: Any, backend: Any, latency_share: float | None, baseline_bound: str | None
) -> Callable[[Roofs], Roofline]:
    """Classify the counted step against given roofs, at the device's latency line and hysteresis."""
    from pytest_gpuperf.profiling.roofline import (
        HOST_CPU_HYSTERESIS,
        HYSTERESIS,
        classify,
        default_latency_share,
        device_busy_share,
    )

    host = backend.is_host_cpu()
    busy = None if host else device_busy_share(timing)
    line_share = default_latency_share(host) if latency_share is None else latency_share
    exact = count.flops_source == "FlopCounterMode" and count.flops > 0

    def judge(roofs: Roofs) -> Roofline:
        line = classify(
            count.flops,
            count.bytes,
            step_seconds(timing),
            roofs,
            line_share,
            baseline_bound,
            # A host-CPU device's speed swings up to 2x with its neighbours' load: there the band is a factor of 2.
            HOST_CPU_HYSTERESIS if host else HYSTERESIS,
            count.working_set,
            busy,
            cold=getattr(timing, "method", "") == "l2_flush",
        )
        return replace(line, exact_flops=exact)  # the classification, told whether its FLOPs are exact

    return judge


def verdict_metrics(name: str, count: StepCount, line: Roofline, roofs: Roofs) -> list[Metric]:
    """``<name>.bound`` (category), the counted work (``<name>.flops_per_step``, ``<name>.bytes_per_step``, judged:
    :mod:`pytest_gpuperf.judging.work`), ``<name>.arithmetic_intensity`` and ``<name>.roof_share`` (info)."""
    extra: dict[str, Any] = {
        **line.as_extra(),
        "flops_source": count.flops_source,
        "bytes_source": count.bytes_source,
        "dtype_class": roofs.dtype_class,
        "roofs": roofs.key,
        "dram_bandwidth": roofs.bandwidth,
        "explain": line.explain(),
        "kept_from_baseline": line.kept_from_baseline,
    }
    if roofs.cache_bandwidth and roofs.cache_bytes:
        extra.update(cache_bandwidth=roofs.cache_bandwidth, cache_bytes=roofs.cache_bytes, cache_name=roofs.cache_name)
    share_metric = Metric(f"{name}.roof_share", line.roof_share, "", "higher", KIND_CUSTOM, judged=False, extra=extra)
    if line.over_roof:  # never shown as a fact; a word is a category (a baseline keeps no number for it)
        share_metric = Metric(
            f"{name}.roof_share", line.over_roof_word(), "", "equal", KIND_CATEGORY, judged=False, extra=extra
        )
    from pytest_gpuperf.judging.work import work_metrics

    sources = {"flops_source": count.flops_source, "bytes_source": count.bytes_source}
    return [
        *work_metrics(name, count.flops, count.bytes, sources),
        Metric(f"{name}.bound", line.bound, "", "equal", KIND_CATEGORY, extra=extra),
        Metric(
            f"{name}.arithmetic_intensity",
            line.arithmetic_intensity,
            "FLOP/B",
            "equal",
            KIND_CUSTOM,
            judged=False,
            extra={"ridge_point": line.ridge_point},
        ),
        share_metric,
    ]
