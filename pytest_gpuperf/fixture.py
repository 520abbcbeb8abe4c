"""The ``gpuperf`` fixture object: measure a step, record a metric, size work per device.

One ``measure()`` call is a chain of values (:mod:`.measuring`): plan -> probes -> time -> metrics -> count
(feature hooks) -> sink (the judging service: judge, confirm, store); the session's hooks report the stored
verdicts. The handle holds the frozen :class:`~.context.TestContext` and the judging service; it never drives
the session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.measuring.pipeline import Stages
from pytest_gpuperf.measuring.plan import MeasureCall
from pytest_gpuperf.results import Better, Metric
from pytest_gpuperf.validate import (
    MAX_WORD,
    check_measure_args,
    checked_record_args,
    is_integer,
    name_problem,
    short_repr,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import AfterMeasure, MeasureInstead
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.measuring.plan import MeasurePlan
    from pytest_gpuperf.timing import MeasureConfig, TimingResult
    from pytest_gpuperf.timing.calibration import Calibration

    #: Adjusts the loop's settings for one step, given the step, just before it is planned and timed.
    AdjustConfig = Callable[[MeasureConfig, Callable[[], object]], MeasureConfig]

#: Least warm-up on a GPU before sampling (clock ramp-up from idle).
GPU_WARMUP_SECONDS = 0.3


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

    #: Adjusts the loop's settings for one step just before it is planned and timed, given the step (the
    #: distributed feature passes one to a rank's handle so every rank makes the same calls); None: as they are.
    adjust_config: AdjustConfig | None = None

    def __init__(
        self,
        context: TestContext,
        judging: Judging | None = None,
        after_measure: AfterMeasure | None = None,
        confirmed_elsewhere: bool = False,
        adjust_config: AdjustConfig | None = None,
        instead: MeasureInstead | None = None,
    ) -> None:
        self.context = context
        #: Asked before a step is measured whether a feature ran it in place of measuring (the ncu child).
        self._instead = instead
        self.judging = judging
        self._after_measure = after_measure
        self.adjust_config = adjust_config
        #: A suspected regression is confirmed in a fresh process after the test body (by the session), not here.
        self.confirmed_elsewhere = confirmed_elsewhere
        self.measurements: list[Measurement] = []
        self.metrics: list[Metric] = []
        #: Names taken by ``record()`` in this test (measured names are those of ``metrics`` from ``measure()``).
        self.recorded_names: set[str] = set()

    @property
    def node_id(self) -> str:
        """The test's node id."""
        return self.context.node_id

    @property
    def backend(self) -> Backend:
        """The backend this test instance runs on."""
        return self.context.backend

    @property
    def options(self) -> Any:
        """The test's ``@pytest.mark.gpuperf(...)`` options (read-only)."""
        return self.context.options

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
        return self.judging is not None

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

    def measure_config(self) -> MeasureConfig:
        """The measuring loop's settings for this test: the session's, with the marker's overrides."""
        assert self.judging is not None
        config = self.judging.settings.measure
        overrides = {key: self.options[key] for key in ("max_time", "min_samples") if key in self.options}
        if "precision" in self.options:
            overrides["target_precision"] = self.options["precision"]
        if not self.backend.is_host_cpu():
            # An idle GPU sits at low clocks and needs a few hundred ms of load to reach its boost clock, or the
            # first test of a run reads slow. On CUDA the power warm-up, when it runs, holds the clock and power
            # instead (timing.sampling.ramp_in_warmup).
            overrides["gpu_ramp"] = max(config.gpu_ramp, GPU_WARMUP_SECONDS)
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

        Records ``<name>.time`` (seconds per step, device-timed), ``<name>.peak_memory`` (bytes, when ``memory``),
        ``<name>.throughput`` (``items`` per step as ``unit``/s, judged instead of time when given), and
        ``flop_rate`` / ``bandwidth`` when ``flops`` / ``bytes_moved`` per step are known. Without ``--gpuperf``
        the step runs once as a smoke test. A name may be measured once per test."""
        __tracebackhide__ = True  # a bad argument's traceback ends at the test's own line
        call = self._checked(step, MeasureCall(name, items, unit, flops, bytes_moved, memory))
        unmeasured = self._unmeasured(step, name)
        if unmeasured is not None:
            return self._kept(unmeasured, [])
        stages = Stages(self.context, self.judging, step, self._after_measure)
        plan = self._plan(step, call)
        probes = stages.probe(plan)
        timing = stages.time(plan, probes)
        metrics = self._names_free(name, stages.metrics(plan, timing, probes))
        metrics += stages.count(plan, timing, metrics)
        stages.sink(plan, probes, metrics, confirm_here=not self.confirmed_elsewhere)
        return self._kept(Measurement(name, {m.name: m for m in metrics}, timing), metrics)

    def _checked(self, step: Callable[[], object], call: MeasureCall) -> MeasureCall:
        """``measure()``'s arguments, refused with the test's id and the argument when they cannot be measured."""
        __tracebackhide__ = True
        if not callable(step):
            raise TypeError(
                f"{self.node_id}: gpuperf.measure() takes the step to time as a zero-argument callable, got "
                f"{type(step).__name__!s} {short_repr(step)}; pass the work itself, e.g. "
                "gpuperf.measure(lambda: model(x)), not its result"
            )
        check_measure_args(self.node_id, call.name, call.items, call.flops, call.bytes_moved)
        problem = name_problem(call.unit, "unit", MAX_WORD)
        if problem:
            raise ValueError(f"{self.node_id}: gpuperf.measure(name={call.name!r}): {problem}")
        if any(m.name == call.name for m in self.measurements):
            raise ValueError(
                f"{self.node_id}: gpuperf.measure(name={call.name!r}) was already called in this test; "
                "give each measured step its own name (name='forward', name='backward', ...)"
            )
        return call

    def _unmeasured(self, step: Callable[[], object], name: str) -> Measurement | None:
        """An empty measurement when ``step`` is not measured: without ``--gpuperf`` (it runs once, a smoke test)
        or when a feature ran it in place of measuring (``pytest_gpuperf_measure_instead``); else None."""
        if self.judging is None:
            step()
            self.backend.synchronize()
            return Measurement(name=name, smoke=True)
        if self._instead is not None and self._instead(self.context, step, name):
            return Measurement(name=name, smoke=True)
        return None

    def _plan(self, step: Callable[[], object], call: MeasureCall) -> MeasurePlan:
        """The plan stage: this test's settings (adjusted for the step), its baseline's, the host calibration."""
        from pytest_gpuperf.measuring.plan import plan_measure

        assert self.judging is not None
        config = self.measure_config()
        if self.adjust_config is not None:
            config = self.adjust_config(config, step)
        # the calibration is measured before the first timing of this process, never after a step of it
        return plan_measure(self.context, self.judging, config, call, self.calibration())

    def _kept(self, measurement: Measurement, metrics: list[Metric]) -> Measurement:
        """Keep a finished measurement and its metrics on the handle."""
        self.measurements.append(measurement)
        self.metrics.extend(metrics)
        return measurement

    def _names_free(self, name: str, metrics: list[Metric]) -> list[Metric]:
        """``metrics``, refused when one's name an earlier ``record()`` of this test took (one name, one metric)."""
        taken = {m.name for m in self.metrics} & {m.name for m in metrics}
        if taken:
            raise ValueError(
                f"{self.node_id}: gpuperf.measure(name={name!r}) produces {', '.join(sorted(map(repr, taken)))}, "
                "which an earlier gpuperf.record() in this test already used; rename one of them"
            )
        return metrics

    def calibration(self) -> Calibration | None:
        """This process's calibration on a host-CPU backend (:mod:`pytest_gpuperf.timing.calibration`), else None."""
        if not self.backend.is_host_cpu():
            return None  # a GPU's timings are judged with its own clock evidence
        from pytest_gpuperf.timing.calibration import process_calibration

        return process_calibration()

    def record(self, name: str, value: float | str, unit: str = "", better: Better = "lower") -> Metric:
        """Record any other metric (for example one a script printed) and judge it against its baseline.

        ``better`` is ``"lower"``, ``"higher"`` or ``"equal"``; a string ``value`` is a
        category that fails the test when it changes. A number must be finite (0-d
        tensors and numpy scalars are converted with ``float()``; with ``unit="B"`` it is
        a memory size and must not be negative); anything else fails this test with a
        ``TypeError``/``ValueError`` naming the metric, and nothing is recorded.

        A category is stored with ``better: equal``. An integer recorded with ``better="equal"`` (a parameter
        count, a number of kernels) must stay exactly equal: its tolerance is 0 unless the marker's
        ``tolerances={name: ...}`` gives one.
        """
        exact = better == "equal" and is_integer(value)
        value, kind = checked_record_args(self.node_id, self.metrics, self.recorded_names, name, value, unit, better)
        metric = Metric(name, value, unit, "equal" if kind == "category" else better, kind)
        if exact:
            metric.tolerance = 0.0
        self.metrics.append(metric)
        self.recorded_names.add(name)
        if self.judging is not None:
            self.judging.store(self.context, self.judging.judge(self.context, [metric]))
        return metric


def handle_for(item: Any, backend: Backend, marker_kwargs: Mapping[str, Any]) -> GpuPerf:
    """The ``gpuperf`` handle of a test item: its frozen context, the session's judging service and hooks.

    ``marker_kwargs``: the marker's options, as collection checked them (``MarkerOptions``) or to be checked.
    """
    import pytest

    from pytest_gpuperf.context import MarkerError, build_context
    from pytest_gpuperf.keys import SESSION_KEY, WORLD_SIZE_KEY

    try:
        context = build_context(item.nodeid, backend, marker_kwargs, item.stash.get(WORLD_SIZE_KEY, None))
    except MarkerError as exc:
        pytest.fail(str(exc), pytrace=False)
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None:
        return GpuPerf(context)
    hook = item.config.hook.pytest_gpuperf_after_measure

    def after_measure(measured: Any) -> list[Metric]:
        return [metric for metrics in hook(context=measured) for metric in (metrics or [])]

    def instead(test: TestContext, step: Callable[[], object], name: str) -> bool:
        return bool(item.config.hook.pytest_gpuperf_measure_instead(context=test, step=step, name=name))

    from pytest_gpuperf.judging.replication import can_replicate

    return GpuPerf(context, session.judging, after_measure, can_replicate(item), instead=instead)
