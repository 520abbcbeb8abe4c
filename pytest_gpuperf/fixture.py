"""The ``gpuperf`` fixture object: measure a step, record a metric, size work per device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.results import (
    KIND_CUSTOM,
    KIND_MEMORY,
    KIND_THROUGHPUT,
    KIND_TIME,
    Better,
    Metric,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.measure import MeasureConfig, TimingResult
    from pytest_gpuperf.session import GpuperfSession

#: Least warm-up on a GPU before sampling (clock ramp-up from idle).
GPU_WARMUP_SECONDS = 0.3

#: Keys accepted by ``@pytest.mark.gpuperf(...)``.
MARKER_KEYS = frozenset(
    {
        "time_tolerance",
        "memory_tolerance",
        "tolerance",
        "tolerances",
        "max_time",
        "min_samples",
        "precision",
        "bound",
        "informational",
    }
)


@dataclass
class Measurement:
    """What one ``gpuperf.measure()`` call produced (``metrics`` is empty in smoke mode)."""

    name: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    timing: TimingResult | None = None
    smoke: bool = False

    def __getitem__(self, key: str) -> Metric:
        """``m["time"]`` or ``m["step.time"]``: one metric of this measurement."""
        return self.metrics[key] if key in self.metrics else self.metrics[f"{self.name}.{key}"]


class GpuPerf:
    """Per-test handle returned by the ``gpuperf`` fixture."""

    def __init__(self, node_id: str, backend: Backend, session: GpuperfSession | None, marker_kwargs: dict[str, Any]):
        unknown = set(marker_kwargs) - MARKER_KEYS
        if unknown:
            import pytest

            pytest.fail(
                f"{node_id}: @pytest.mark.gpuperf got unknown argument(s) {sorted(unknown)}; "
                f"known: {sorted(MARKER_KEYS)}",
                pytrace=False,
            )
        self.node_id = node_id
        self.backend = backend
        self.session = session
        self.options = marker_kwargs
        self.measurements: list[Measurement] = []
        self.metrics: list[Metric] = []

    @property
    def device(self) -> Any:
        """The device to compute on (``torch.device('cuda', 0)``, ``torch.device('cpu')`` ...)."""
        return self.backend.device()

    @property
    def backend_name(self) -> str:
        """Name of the backend this test instance runs on."""
        return self.backend.name

    @property
    def enabled(self) -> bool:
        """True under ``--gpuperf``; False in smoke mode (step runs once, nothing judged)."""
        return self.session is not None

    def pick(self, default: Any = None, **per_backend: Any) -> Any:
        """Size work by device: ``gpuperf.pick(cpu=256, cuda=4096)`` (``default`` for the rest)."""
        if self.backend.name in per_backend:
            return per_backend[self.backend.name]
        if default is None:
            raise KeyError(
                f"{self.node_id}: gpuperf.pick() has no value for backend {self.backend.name!r}; "
                f"pass {self.backend.name}=... or default=..."
            )
        return default

    def _measure_config(self) -> MeasureConfig:
        from dataclasses import replace

        assert self.session is not None
        config = self.session.settings.measure
        overrides = {key: self.options[key] for key in ("max_time", "min_samples") if key in self.options}
        if "precision" in self.options:
            overrides["target_precision"] = self.options["precision"]
        if not self.backend.is_host_cpu():
            # An idle GPU sits at low clocks (345 MHz on the H200) and needs a few hundred ms of load to reach its
            # boost clock; a short warm-up made the first test of a run read up to 45% slow there.
            overrides["warmup_time"] = max(config.warmup_time, GPU_WARMUP_SECONDS)
        return replace(config, **overrides) if overrides else config

    def measure(
        self,
        step: Callable[[], object],
        *,
        name: str = "step",
        items: float | None = None,
        unit: str = "items",
        flops: float | None = None,
        bytes_moved: float | None = None,
        memory: bool = True,
    ) -> Measurement:
        """Measure ``step`` (a zero-argument callable) and judge it against the baseline.

        Records ``<name>.time`` (seconds per step, device-timed), ``<name>.peak_memory``
        (bytes, when ``memory``), ``<name>.throughput`` (``items`` per step as
        ``unit``/s, judged instead of time when given), and ``flop_rate`` /
        ``bandwidth`` when ``flops`` / ``bytes_moved`` per step are known.
        Without ``--gpuperf`` the step runs once as a smoke test.
        """
        if self.session is None:
            step()
            self.backend.synchronize()
            measurement = Measurement(name=name, smoke=True)
            self.measurements.append(measurement)
            return measurement
        from pytest_gpuperf.measure import measure_time
        from pytest_gpuperf.plan import plan_measure

        peak = None
        if memory:
            # Before the drift probes exist (they are released after every measure()), so the peak is the step's
            # own: one warm-up call first, so lazy one-time allocations do not stand in for the steady state.
            step()
            peak = self.backend.measure_peak_memory(step)
        plan = plan_measure(self, step, self._measure_config(), name, items, flops, bytes_moved)
        timing = measure_time(self.backend, step, plan.config, plan.probe, plan.stop_rule)
        metrics = self._timing_metrics(name, timing, items, unit, flops, bytes_moved)
        if peak is not None:
            metrics.append(
                Metric(
                    f"{name}.peak_memory", peak, "B", "lower", KIND_MEMORY, extra={"note": self.backend.memory_note()}
                )
            )
        if self.session.extensions:
            from pytest_gpuperf.extensions import MeasureContext

            hints = {"items": items, "unit": unit, "flops": flops, "bytes_moved": bytes_moved}
            context = MeasureContext(self, step, name, timing, list(metrics), hints)
            for extension in self.session.extensions:
                metrics.extend(extension.after_measure(context))
        verdicts = self.session.judge(self, metrics)
        if self.session.should_confirm(verdicts):
            timing = measure_time(self.backend, step, plan.config, plan.probe, plan.stop_rule)
            retimed = {m.name: m for m in self._timing_metrics(name, timing, items, unit, flops, bytes_moved)}
            metrics = [retimed.get(m.name, m) for m in metrics]
            for metric in metrics:
                metric.extra["confirmed"] = True
            verdicts = self.session.judge(self, metrics)
        del plan
        self.session.release_probes(self.backend)
        self.session.store(self, verdicts)
        measurement = Measurement(name=name, metrics={m.name: m for m in metrics}, timing=timing)
        self.measurements.append(measurement)
        self.metrics.extend(metrics)
        return measurement

    def _timing_metrics(
        self,
        name: str,
        timing: TimingResult,
        items: float | None,
        unit: str,
        flops: float | None,
        bytes_moved: float | None,
    ) -> list[Metric]:
        median = timing.typical  # the judged statistic (a low quantile, see measure.STAT_QUANTILE)
        extra: dict[str, Any] = timing.summary()
        metrics = [
            Metric(
                f"{name}.time",
                median,
                "s",
                "lower",
                KIND_TIME,
                samples=list(timing.samples),
                normalized=list(timing.normalized),
                judged=items is None,
                extra=extra,
            )
        ]
        if items is not None:
            metrics.append(
                Metric(
                    f"{name}.throughput",
                    items / median,
                    f"{unit}/s",
                    "higher",
                    KIND_THROUGHPUT,
                    samples=[items / s for s in timing.samples],
                    normalized=[1.0 / r for r in timing.normalized if r > 0],
                    extra=extra,
                )
            )
        if flops:
            metrics.append(Metric(f"{name}.flop_rate", flops / median, "FLOP/s", "higher", KIND_CUSTOM, judged=False))
        if bytes_moved:
            metrics.append(
                Metric(f"{name}.bandwidth", bytes_moved / median, "B/s", "higher", KIND_CUSTOM, judged=False)
            )
        return metrics

    def record(self, name: str, value: float | str, unit: str = "", better: Better = "lower") -> Metric:
        """Record any other metric (for example one a script printed) and judge it against its baseline.

        ``better`` is ``"lower"``, ``"higher"`` or ``"equal"``; a string ``value`` is a
        category that fails the test when it changes.
        """
        if better not in ("lower", "higher", "equal"):
            raise ValueError(
                f"{self.node_id}: gpuperf.record({name!r}): better must be 'lower', 'higher' or 'equal', got {better!r}"
            )
        kind = "category" if isinstance(value, str) else KIND_CUSTOM
        if unit == "B" and kind == KIND_CUSTOM:
            kind = KIND_MEMORY
        metric = Metric(name, value, unit, better, kind)
        self.metrics.append(metric)
        if self.session is not None:
            self.session.store(self, self.session.judge(self, [metric]))
        return metric
