"""Device time of a CUDA step: CUDA-graph replay of the whole step, else CUPTI kernel sums, else events.

Events around eager calls time the host as much as the GPU: the seed's Linear
forward + backward read 398 us that way on the H200, of which the GPU's kernels
took 197 us and one graph replay of the whole step 209 us; between fresh
processes eager times spread 2.2x where replays spread 0.5%. So the judged
samples are the GPU's own time per step:

* ``cuda_graph``: the whole step (forward, backward, a capturable optimizer)
  captured into one graph (:mod:`pytest_gpuperf.timing.cuda.graph`), replays timed by
  events; an eager sample (events around ``iters`` eager calls, retaken when the
  host thread waited for a CPU) is taken beside each replay;
* ``cupti``: capture failed (a host sync, a non-capturable op or optimizer):
  eager samples first (half the remaining budget), then one profiler session
  whose per-step kernel durations are summed (:mod:`pytest_gpuperf.timing.cuda.cupti`);
* ``events``: neither worked; the eager samples are judged (``method_note`` says why).

The eager samples give ``eager_time`` and ``host_overhead`` (eager minus device
time) and ``host_bound``; NVML readings (:mod:`pytest_gpuperf.timing.cuda.nvml`) taken at the
start, every :data:`CLOCK_EVERY` samples and at the end go into ``clocks``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.stats import median
from pytest_gpuperf.timing.sampling import POWER_STATE, TimingResult, counted, power_warmup_planned, sample_loop
from pytest_gpuperf.timing.stop_criterion import StopCriterion

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.timing.cuda.nvml import ClockWatch
    from pytest_gpuperf.timing.sampling import MeasureConfig, SamplingPlan
    from pytest_gpuperf.timing.warmup import WarmupResult

#: Read NVML every this many samples (a reading costs tens of microseconds).
CLOCK_EVERY = 10
#: Most steps run inside the CUDA profiler (each kernel sum is one exact step; a few dozen suffice).
MAX_PROFILED_STEPS = 30
#: Least seconds of samples on a GPU at its power cap. There the clock moves in a feedback loop: on the H200 a
#: GEMM's judged quantile over 0.1 s windows of one process varied by 1.8% (standard deviation), over 0.5 s by
#: 0.6%, over 1 s by 0.4% (``gpu/clock_traces.py``, 10 processes x 4 s; docs/PERFORMANCE.md), and a
#: measurement that stopped after its first 30 samples (about 0.1 s) read a +6% slowdown as +3.2% .. +6.9%.
#: A ``gpuperf_max_time`` below it shortens it (:func:`capped_span`): A/B workers measure 0.5 s by default.
CAPPED_SPAN = 1.0


def capped_span(config: MeasureConfig) -> float:
    """Least seconds of samples at the power cap: :data:`CAPPED_SPAN`, or the measuring budget when that is shorter
    (a budget the user or the A/B runner chose: ``gpuperf_ab_max_time`` 0.5 s, a 0.6% spread of one process's
    judged time on the H200, where the paired A and B processes weigh it)."""
    return min(CAPPED_SPAN, config.max_time)


Capture = Callable[[Callable[[], object], int], tuple[Any, str]]
KernelSums = Callable[[Callable[[], object], int], tuple[list[float], str]]


def _default_capture(step: Callable[[], object], iters: int) -> tuple[Any, str]:
    from pytest_gpuperf.timing.cuda.graph import capture

    return capture(step, iters)


def _default_kernel_sums(step: Callable[[], object], steps: int) -> tuple[list[float], str]:
    from pytest_gpuperf.timing.cuda.cupti import kernel_sums

    return kernel_sums(step, steps)


def _default_watch() -> ClockWatch:
    from pytest_gpuperf.timing.cuda.nvml import ClockWatch

    return ClockWatch.for_current_device()


def measure_device_time(
    backend: Backend,
    step: Callable[[], object],
    result: TimingResult,
    plan: SamplingPlan,
    warm: WarmupResult,
    *,
    capture: Capture = _default_capture,
    kernel_sums: KernelSums = _default_kernel_sums,
    watch: ClockWatch | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> None:
    """Fill ``result`` with device-time samples of ``step`` (module doc); graph, profiler and NVML injectable."""
    watch = watch if watch is not None else _default_watch()
    config = plan.config
    with watch.recording(result):
        iters = result.iters_per_sample
        per_call = max(warm.per_call, warm.wall_per_call)
        taken = [0]

        def eager_calls() -> float:
            return backend.time_block(step, iters) / iters

        def eager() -> float:
            value = plan.guard.take(eager_calls, may_retake=lambda: now() < plan.deadline)
            taken[0] += 1
            if taken[0] % CLOCK_EVERY == 0:
                watch.read()
            return value

        graph, reason = None, "gpuperf_cuda_graph=off"
        if config.cuda_graph != "off":
            if counted(config) or (iters + 3) * per_call <= config.max_time / 2:
                graph, reason = capture(step, iters)
            else:
                reason = f"capturing {iters} call(s) of {per_call:.3g} s would take over half the budget"
        # The GPU's clock ramp the warm-up left to the power warm-up (timing.sampling.ramp_in_warmup): owed when
        # no power warm-up runs after all (no graph, no NVML reading).
        owed = max(0.0, config.gpu_ramp - warm.seconds) if power_warmup_planned(config) else 0.0
        loop = _Loop(eager, result, plan, now, watch, owed, eager_calls)
        if graph is not None:
            _graph_samples(graph, loop)
        else:
            _fallback_samples(step, loop, kernel_sums, reason)


@dataclass(frozen=True)
class _Loop:
    """What both sampling paths share: the eager sampler, the result they fill, the plan, the clock and NVML."""

    eager: Callable[[], float]
    result: TimingResult
    plan: SamplingPlan
    now: Callable[[], float]
    watch: ClockWatch
    #: Seconds of load the GPU's clock ramp still needs when no power warm-up holds its state.
    ramp: float
    #: The step's eager calls, not recorded: the ramp's load when there is no graph.
    load: Callable[[], object]

    def ramp_with(self, call: Callable[[], object]) -> float:
        """Call ``call`` until :attr:`ramp` seconds have passed; the seconds it took."""
        began = self.now()
        while self.now() - began < self.ramp:
            call()
        return self.now() - began


def _graph_samples(graph: Any, loop: _Loop) -> None:
    result = loop.result
    result.method, result.iters_per_sample = "cuda_graph", graph.iters
    replay = loop.watch.timed(lambda: graph.time() / graph.iters)

    def take() -> float:
        result.eager_samples.append(loop.eager())
        return replay()

    try:
        plan = loop.plan
        warmed, capped = _sustain(graph.time, loop.watch, plan.config, result, loop.now)
        if POWER_STATE not in result.instruments:
            warmed += loop.ramp_with(graph.time)
        span = capped_span(plan.config) if capped else 0.0
        if capped and POWER_STATE in result.instruments:
            result.instruments[POWER_STATE]["min_sample_seconds"] = span
        deadline = max(plan.deadline + warmed, loop.now() + span)
        sample_loop(take, result, plan.config, plan.stop_rule, deadline, plan.floor, now=loop.now, span=span)
    finally:
        graph.close()


def _sustain(
    replay: Callable[[], object],
    watch: ClockWatch,
    config: MeasureConfig,
    result: TimingResult,
    now: Callable[[], float],
) -> tuple[float, bool]:
    """Replay until the GPU's power state holds (:mod:`pytest_gpuperf.timing.cuda.power_state`).

    Returns the seconds it took and whether the GPU ran at its power cap.
    """
    if config.power_warmup <= 0 or watch.reader is None or counted(config):
        return 0.0, False
    from pytest_gpuperf.timing.cuda.power_state import warm_to_sustained

    reader = watch.reader
    try:
        state = warm_to_sustained(replay, reader, config.power_warmup, now=now)
    except OSError as exc:
        watch.error = str(exc)
        return 0.0, False
    result.instruments[POWER_STATE] = state.facts()
    return state.seconds, state.power_capped


def _fallback_samples(step: Callable[[], object], loop: _Loop, kernel_sums: KernelSums, reason: str) -> None:
    eager, result, config, stop_rule = loop.eager, loop.result, loop.plan.config, loop.plan.stop_rule
    deadline, floor, now, watch = loop.plan.deadline, loop.plan.floor, loop.now, loop.watch
    notes = [f"no CUDA graph ({reason})"] if reason else []
    deadline += loop.ramp_with(loop.load)
    profile = config.cupti and not counted(config)
    eager_part = TimingResult(samples=[])
    eager_deadline = now() + max(0.0, deadline - now()) / 2 if profile else deadline
    # Each eager sample gets its SM clock too: judged when neither a graph nor CUPTI times the step (a distributed
    # step with collectives, in lockstep), replaced by the profiler session's clock when CUPTI does.
    timed_eager = watch.timed(eager)
    sample_loop(timed_eager, eager_part, config, None if profile else stop_rule, eager_deadline, floor, now=now)
    sums: list[float] = []
    if profile:
        per_step = median(eager_part.samples)
        affordable = int(max(0.0, deadline - now()) / per_step) if per_step > 0 else MAX_PROFILED_STEPS
        steps = max(floor, min(MAX_PROFILED_STEPS, config.max_samples, affordable))
        before = watch.read()
        sums, why = kernel_sums(step, steps)
        after = watch.read()
        if sums and before is not None and after is not None:  # one profiler session: one clock for its steps
            clock = (before.sm_clock_mhz + after.sm_clock_mhz) / 2.0
            watch.sample_clocks[:] = [clock] * len(sums)
        if not sums:
            notes.append(f"no CUPTI kernel times ({why})")
    if sums:
        result.method, result.iters_per_sample = "cupti", 1
        result.samples = sums
        result.eager_samples = list(eager_part.samples)
        StopCriterion(config, stop_rule, deadline, floor, now).is_finished(result, final=True)
    else:
        notes.append("timed eager calls between CUDA events (host time included)")
        result.method = "events"
        result.samples = list(eager_part.samples)
        result.precision, result.stop = eager_part.precision, eager_part.stop
        result.budget_exhausted = eager_part.budget_exhausted
    result.method_note = "; ".join(filter(None, [result.method_note, *notes]))
