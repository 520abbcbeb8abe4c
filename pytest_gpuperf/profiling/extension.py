"""The ``measure()`` extension of the profiling feature: bound verdicts, torch.profiler and ncu capture.

Registered on the active session by :mod:`pytest_gpuperf.profiling.plugin`. For every
measured step on a torch backend it returns ``<name>.bound`` (category, stored in the
baseline: a change fails the test) with ``<name>.arithmetic_intensity`` and
``<name>.roof_share`` (info); with ncu capture also ``<name>.ncu_bound`` and the
Speed-of-Light percentages. What it learned is stashed on the test item for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.profiling.records import PROFILE_KEY, PROFILE_REQUESTED_KEY, StepProfile
from pytest_gpuperf.results import KIND_CATEGORY, KIND_CUSTOM, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.profiling.analytic import StepCount
    from pytest_gpuperf.profiling.roofs import RoofProvider
    from pytest_gpuperf.session import GpuperfSession


@dataclass(frozen=True)
class ProfilingSettings:
    """The feature's options, resolved once at configure time."""

    profile: bool
    ncu: bool
    artifacts_dir: Path
    latency_share: float
    ncu_timeout: float
    rootdir: Path
    xdist: bool


def profile_requested(item: pytest.Item, settings: ProfilingSettings) -> bool:
    """torch.profiler capture for this test: the flag, the ``gpuperf_profile`` marker or fixture."""
    return (
        settings.profile
        or item.get_closest_marker("gpuperf_profile") is not None
        or item.stash.get(PROFILE_REQUESTED_KEY, False)
    )


def ncu_requested(item: pytest.Item, settings: ProfilingSettings) -> bool:
    """Nsight Compute capture for this test: the flag or the ``gpuperf_ncu`` marker."""
    return settings.ncu or item.get_closest_marker("gpuperf_ncu") is not None


class ProfilingExtension:
    """Adds bound verdicts (analytic, and ncu's when captured) and profiler artifacts to each measured step."""

    def __init__(self, session: GpuperfSession, settings: ProfilingSettings, roofs: RoofProvider) -> None:
        self.session = session
        self.settings = settings
        self.roofs = roofs
        self.current_item: pytest.Item | None = None
        self._occurrences: dict[str, int] = {}

    def start_item(self, item: pytest.Item | None) -> None:
        """Called around each test by the plugin so ``after_measure`` knows whose step it is."""
        self.current_item = item
        self._occurrences = {}

    def after_measure(self, context: MeasureContext) -> list[Metric]:
        """Classify the step; capture a trace and ncu numbers when asked; stash the record on the item."""
        handle = context.handle
        if not handle.backend.runs_torch:
            return []
        item = self.current_item
        record = StepProfile(context.name)
        occurrence = self._occurrences.get(context.name, 0)
        self._occurrences[context.name] = occurrence + 1
        metrics = self._analytic(context, record)
        if item is not None and profile_requested(item, self.settings):
            self._trace(context, record, occurrence)
        if item is not None and ncu_requested(item, self.settings):
            metrics += self._ncu(context, record, occurrence)
        self._check_expected_bound(context, record, metrics)
        if item is not None:
            item.stash.setdefault(PROFILE_KEY, []).append(record)
        return metrics

    # -- analytic ------------------------------------------------------------------
    def _count(self, context: MeasureContext, record: StepProfile) -> StepCount | None:
        from pytest_gpuperf.profiling.analytic import StepCount, count_step

        hints = context.hints
        flops_hint, bytes_hint = hints.get("flops"), hints.get("bytes_moved")
        try:
            count = count_step(context.step, context.handle.backend.synchronize)
        except Exception as exc:  # noqa: BLE001 - any step may refuse to run under a dispatch mode
            if not (flops_hint and bytes_hint):
                record.notes.append(f"no bound verdict: counting FLOPs/bytes failed ({type(exc).__name__}: {exc})")
                return None
            count = StepCount(0.0, 0.0, "float32")
        if flops_hint:
            count.flops, count.flops_source = float(flops_hint), "flops= hint"
        if bytes_hint:
            count.bytes, count.bytes_source = float(bytes_hint), "bytes_moved= hint"
        return count

    def _analytic(self, context: MeasureContext, record: StepProfile) -> list[Metric]:
        from pytest_gpuperf.profiling.analytic import HOST_CPU_HYSTERESIS, HYSTERESIS, roofline

        count = self._count(context, record)
        if count is None:
            return []
        backend = context.handle.backend
        roofs = self.roofs.roofs(backend, self.session.fingerprint_for(backend), count.dtype)
        line = roofline(
            count.flops,
            count.bytes,
            context.timing.median,
            roofs.peak_flops,
            roofs.peak_bandwidth,
            self.settings.latency_share,
            self._baseline_value(context, f"{context.name}.bound"),
            # A host-CPU device's speed swings up to 2x with its neighbours' load (one flip of a CPU step between
            # memory- and latency-bound in six unchanged runs here): there the band is a factor of 2.
            HOST_CPU_HYSTERESIS if backend.is_host_cpu() else HYSTERESIS,
        )
        extra = {
            **line.as_extra(),
            "flops_source": count.flops_source,
            "bytes_source": count.bytes_source,
            "dtype_class": roofs.dtype_class,
            "roofs": roofs.cache_key,
            "explain": line.explain(),
            "kept_from_baseline": line.kept_from_baseline,
        }
        record.verdicts.append(f"analytic {line.explain()} [{count.flops_source}; {count.bytes_source}]")
        name = context.name
        return [
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
            Metric(f"{name}.roof_share", line.roof_share, "", "higher", KIND_CUSTOM, judged=False, extra=extra),
        ]

    def _baseline_value(self, context: MeasureContext, metric: str) -> str | None:
        """The class the baseline holds for ``metric`` (None under ``--gpuperf-update`` or without one)."""
        if self.session.settings.update:
            return None
        baseline = self.session.baseline_for(self.session.fingerprint_for(context.handle.backend))
        entry = (baseline.tests.get(context.handle.node_id) or {}).get(metric) if baseline else None
        value = entry.get("value") if isinstance(entry, dict) else None
        return value if isinstance(value, str) else None

    # -- torch.profiler -------------------------------------------------------------
    def _artifact(self, context: MeasureContext, occurrence: int, suffix: str) -> Path:
        from pytest_gpuperf.profiling.torch_trace import artifact_stem

        stem = artifact_stem(context.handle.node_id, context.name)
        if occurrence:
            stem += f"-{occurrence}"
        return self.settings.artifacts_dir / f"{stem}{suffix}"

    def _trace(self, context: MeasureContext, record: StepProfile, occurrence: int) -> None:
        from pytest_gpuperf.profiling.torch_trace import capture_trace

        path = self._artifact(context, occurrence, ".trace.json")
        result = capture_trace(context.handle.backend, context.step, path)
        record.artifacts.append(path)
        record.top_kernels.extend(result.summary().splitlines())

    # -- Nsight Compute ---------------------------------------------------------------
    def _ncu(self, context: MeasureContext, record: StepProfile, occurrence: int) -> list[Metric]:
        from pytest_gpuperf.profiling.ncu_capture import NcuUnavailable, capture_step, find_ncu
        from pytest_gpuperf.profiling.verdict import classify_kernels

        handle = context.handle
        ncu = find_ncu()
        if ncu is None:
            pytest.skip(f"{handle.node_id}: {NCU_MISSING}")
        if handle.backend.name != "cuda":
            record.notes.append(f"ncu: backend {handle.backend.name} runs no CUDA kernels; nothing to capture")
            return []
        csv_path = self._artifact(context, occurrence, ".ncu.csv")
        try:
            capture = capture_step(
                ncu,
                handle.node_id,
                context.name,
                occurrence,
                handle.backend.name,
                self.settings.rootdir,
                csv_path,
                self.settings.ncu_timeout,
                self.settings.xdist,
            )
        except NcuUnavailable as exc:
            pytest.skip(f"{handle.node_id}: Nsight Compute capture unavailable: {exc}")
        sol = classify_kernels(capture.kernels)
        record.artifacts.append(capture.csv_path)
        heaviest = sorted(capture.kernels, key=lambda k: -k.duration_s)[:5]
        record.verdicts.append(f"ncu {sol.describe()} over {len(capture.kernels)} kernel(s), {capture.wall_s:.1f} s")
        record.verdicts += [
            f"  ncu kernel {k.duration_s * 1e6:9.1f} us  SM {k.sm_pct:5.1f}%  mem {k.memory_pct:5.1f}%  "
            f"DRAM {k.dram_pct:5.1f}%  {k.short_name()}"
            for k in heaviest
        ]
        extra = {
            "sm_pct": sol.sm_pct,
            "memory_pct": sol.memory_pct,
            "dram_pct": sol.dram_pct,
            "rule": sol.rule,
            "kernels": len(capture.kernels),
            "kernel_seconds": sum(k.duration_s for k in capture.kernels),
            "csv": str(capture.csv_path),
            "capture_wall_s": capture.wall_s,
            "top_kernel": heaviest[0].short_name() if heaviest else "",
        }
        name = context.name
        return [
            Metric(f"{name}.ncu_bound", sol.bound, "", "equal", KIND_CATEGORY, extra=extra),
            Metric(f"{name}.ncu_sm_pct", sol.sm_pct, "%", "equal", KIND_CUSTOM, judged=False),
            Metric(f"{name}.ncu_memory_pct", sol.memory_pct, "%", "equal", KIND_CUSTOM, judged=False),
            Metric(f"{name}.ncu_dram_pct", sol.dram_pct, "%", "equal", KIND_CUSTOM, judged=False),
        ]

    # -- @pytest.mark.gpuperf(bound=...) ------------------------------------------------
    def _check_expected_bound(self, context: MeasureContext, record: StepProfile, metrics: list[Metric]) -> None:
        from pytest_gpuperf.profiling.verdict import normalize_bound

        expected = context.handle.options.get("bound")
        if expected is None:
            return
        node_id = context.handle.node_id
        try:
            wanted = normalize_bound(expected, f"{node_id}: @pytest.mark.gpuperf(bound=...)")
        except ValueError as exc:
            record.mismatches.append(str(exc))
            return
        verdicts = [m for m in metrics if m.name.endswith((".bound", ".ncu_bound"))]
        if not verdicts:
            record.mismatches.append(
                f"{node_id}: @pytest.mark.gpuperf(bound={expected!r}) cannot be checked for step "
                f"{context.name!r}: no verdict ({'; '.join(record.notes) or 'backend without torch'})"
            )
        for metric in verdicts:
            if metric.value != wanted:
                why = metric.extra.get("explain") or _describe_ncu(metric)
                record.mismatches.append(
                    f"{node_id}: {metric.name} is {metric.value} but @pytest.mark.gpuperf(bound={expected!r}) "
                    f"expects {wanted}: {why}"
                )


NCU_MISSING = (
    "Nsight Compute capture was asked for (--gpuperf-ncu or @pytest.mark.gpuperf_ncu) but `ncu` is not on PATH "
    "(nor $GPUPERF_NCU); install Nsight Compute or drop the flag/marker"
)


def _describe_ncu(metric: Metric) -> str:
    extra = metric.extra
    return (
        f"SM {extra.get('sm_pct', 0):.0f}%, memory {extra.get('memory_pct', 0):.0f}%, "
        f"DRAM {extra.get('dram_pct', 0):.0f}% ({extra.get('rule', '')})"
    )


class NcuChildExtension:
    """In the child process ncu runs: brackets the target step's calls with profiler start/stop."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._seen: dict[str, int] = {}

    def after_measure(self, context: MeasureContext) -> list[Metric]:
        """Profile :data:`~pytest_gpuperf.profiling.ncu_capture.PROFILED_CALLS` calls of the target step only."""
        from pytest_gpuperf.profiling.ncu_capture import bracket_step

        index = self._seen.get(context.name, 0)
        self._seen[context.name] = index + 1
        if (context.name, index) == self.target:
            bracket_step(context.handle.backend, context.step)
        return []
