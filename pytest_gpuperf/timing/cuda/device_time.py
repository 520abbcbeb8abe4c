"""Device time of a CUDA step: CUDA-graph replay of the whole step, else CUPTI kernel sums, else events.

Events around eager calls time the host's launch path as much as the GPU, and between fresh processes eager times
spread far more than graph replays do (``docs/PERFORMANCE.md`` has the figures). So the judged samples are the GPU's
own time per step, taken by :class:`DeviceTimeSampler` (the CUDA backend's sampler), which tries in turn:

* ``cuda_graph``: the whole step (forward, backward, a capturable optimizer)
  captured into one graph (:mod:`pytest_gpuperf.timing.cuda.graph`), replays timed by
  events; an eager sample (events around ``iters`` eager calls, retaken when the
  host thread waited for a CPU) is taken beside each replay;
* ``cupti``: capture failed (a host sync, a non-capturable op or optimizer):
  eager samples first (half the remaining budget), then one profiler session
  whose per-step kernel durations are summed (:mod:`pytest_gpuperf.timing.cuda.cupti`);
* ``events``: neither worked; the eager samples are judged (``method_note`` says why).

The eager samples give ``eager_time`` and ``host_overhead`` (eager minus device
time) and ``host_bound``. Its instruments: NVML readings (:class:`~pytest_gpuperf.timing.cuda.nvml.ClockWatch`)
taken at the start, every :data:`CLOCK_EVERY` samples and at the end go into ``clocks``; the power warm-up
(:class:`~pytest_gpuperf.timing.cuda.power_state.PowerWarmup`) into ``power_state``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.stats import median
from pytest_gpuperf.timing.cuda.power_state import PowerWarmup
from pytest_gpuperf.timing.record import Samples, TimingResult, build_record
from pytest_gpuperf.timing.samplers import BlockSampler
from pytest_gpuperf.timing.sampling import counted, least_warmup, power_warmup_planned, sample_loop
from pytest_gpuperf.timing.stop_criterion import StopCriterion

if TYPE_CHECKING:
    from pytest_gpuperf.timing.cuda.nvml import ClockWatch
    from pytest_gpuperf.timing.record import Instrument
    from pytest_gpuperf.timing.samplers import TimeBlock
    from pytest_gpuperf.timing.sampling import MeasureConfig, SamplingPlan
    from pytest_gpuperf.timing.warmup import WarmupResult

#: Read NVML every this many samples (a reading costs tens of microseconds).
CLOCK_EVERY = 10
#: Most steps run inside the CUDA profiler (each kernel sum is one exact step; a few dozen suffice).
MAX_PROFILED_STEPS = 30
#: Least seconds of samples on a GPU at its power cap. There the clock moves in a feedback loop, so the judged
#: quantile of a short window of samples swings with it (``gpu/clock_traces.py``; ``docs/PERFORMANCE.md``);
#: a second of samples averages it out. A ``gpuperf_max_time`` below it shortens it (:func:`capped_span`).
CAPPED_SPAN = 1.0


def capped_span(config: MeasureConfig) -> float:
    """Least seconds of samples at the power cap: :data:`CAPPED_SPAN`, or the measuring budget when that is shorter
    (a budget the user or the A/B runner chose, where the paired A and B processes weigh the swing)."""
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


class DeviceTimeSampler(BlockSampler):
    """The CUDA backend's sampler (module doc): ``time_block`` (device events) for the warm-up and the eager
    samples; graph capture, the profiler, NVML and the clock injectable."""

    def __init__(
        self,
        time_block: TimeBlock,
        *,
        capture: Capture = _default_capture,
        kernel_sums: KernelSums = _default_kernel_sums,
        watch: ClockWatch | None = None,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(time_block, "events")
        self.capture, self.kernel_sums, self.now = capture, kernel_sums, now
        self._watch = watch
        self.power = PowerWarmup()

    @property
    def watch(self) -> ClockWatch:
        """NVML's watch on the current device (opened when first asked, after the warm-up)."""
        if self._watch is None:
            self._watch = _default_watch()
        return self._watch

    def warmup_seconds(self, config: MeasureConfig) -> float:
        """``warmup_time``; the GPU's clock ramp is left to the power warm-up when one is planned."""
        return least_warmup(config, power_warmup=True)

    def instruments(self) -> Sequence[Instrument]:
        """NVML's clock watch and the power warm-up."""
        return [self.watch, self.power]

    def sample(self, step: Callable[[], object], plan: SamplingPlan) -> Samples:
        """Graph replays, else CUPTI kernel sums, else eager events (module doc)."""
        config, iters, warm, watch = plan.config, plan.iters, plan.warm, self.watch
        per_call = max(warm.per_call, warm.wall_per_call)
        taken_eager = [0]
        clock, now = self.clock, self.now

        def eager_calls() -> float:
            return clock(step, iters) / iters

        def eager() -> float:
            value = plan.guard.take(eager_calls, may_retake=lambda: now() < plan.deadline)
            taken_eager[0] += 1
            if taken_eager[0] % CLOCK_EVERY == 0:
                watch.read()
            return value

        graph, reason = None, "gpuperf_cuda_graph=off"
        if config.cuda_graph != "off":
            if counted(config) or (iters + 3) * per_call <= config.max_time / 2:
                graph, reason = self.capture(step, iters)
            else:
                reason = f"capturing {iters} call(s) of {per_call:.3g} s would take over half the budget"
        # The GPU's clock ramp the warm-up left to the power warm-up (least_warmup): owed when no power warm-up
        # runs after all (no graph, no NVML reading).
        owed = max(0.0, config.gpu_ramp - warm.seconds) if power_warmup_planned(config) else 0.0
        loop = _Loop(eager, plan, self.now, watch, self.power, owed, eager_calls)
        taken = _graph_samples(graph, loop) if graph is not None else _fallback_samples(step, loop, self, reason)
        if len(watch.sample_clocks) == len(taken.samples):
            taken.sample_clocks = list(watch.sample_clocks)
        return taken


@dataclass(frozen=True)
class _Loop:
    """What both sampling paths share: the eager sampler, the plan, the clock, NVML and the power warm-up."""

    eager: Callable[[], float]
    plan: SamplingPlan
    now: Callable[[], float]
    watch: ClockWatch
    power: PowerWarmup
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


def _graph_samples(graph: Any, loop: _Loop) -> Samples:
    taken = Samples(method="cuda_graph", iters_per_sample=graph.iters)
    replay = loop.watch.timed(lambda: graph.time() / graph.iters)

    def take() -> float:
        taken.eager_samples.append(loop.eager())
        return replay()

    try:
        plan = loop.plan
        warmed, capped = _sustain(graph.time, loop, plan.config)
        if loop.power.state is None:
            warmed += loop.ramp_with(graph.time)
        span = capped_span(plan.config) if capped else 0.0
        if capped and loop.power.state is not None:
            loop.power.min_sample_seconds = span
        deadline = max(plan.deadline + warmed, loop.now() + span)
        sample_loop(take, taken, plan.config, plan.stop_rule, deadline, plan.floor, now=loop.now, span=span)
    finally:
        graph.close()
    return taken


def _sustain(replay: Callable[[], object], loop: _Loop, config: MeasureConfig) -> tuple[float, bool]:
    """Replay until the GPU's power state holds (:mod:`pytest_gpuperf.timing.cuda.power_state`), into
    ``loop.power``. Returns the seconds it took and whether the GPU ran at its power cap."""
    watch = loop.watch
    if config.power_warmup <= 0 or watch.reader is None or counted(config):
        return 0.0, False
    from pytest_gpuperf.timing.cuda.power_state import warm_to_sustained

    try:
        state = warm_to_sustained(replay, watch.reader, config.power_warmup, now=loop.now)
    except OSError as exc:
        watch.error = str(exc)
        return 0.0, False
    loop.power.state = state
    return state.seconds, state.power_capped


def _fallback_samples(step: Callable[[], object], loop: _Loop, sampler: DeviceTimeSampler, reason: str) -> Samples:
    config, stop_rule, floor, now, watch = loop.plan.config, loop.plan.stop_rule, loop.plan.floor, loop.now, loop.watch
    notes = [f"no CUDA graph ({reason})"] if reason else []
    deadline = loop.plan.deadline + loop.ramp_with(loop.load)
    profile = config.cupti and not counted(config)
    eager = Samples(iters_per_sample=loop.plan.iters)
    eager_deadline = now() + max(0.0, deadline - now()) / 2 if profile else deadline
    # Each eager sample gets its SM clock too: judged when neither a graph nor CUPTI times the step (a distributed
    # step with collectives, in lockstep), replaced by the profiler session's clock when CUPTI does.
    sample_loop(watch.timed(loop.eager), eager, config, None if profile else stop_rule, eager_deadline, floor, now=now)
    sums: list[float] = []
    if profile:
        per_step = median(eager.samples)
        affordable = int(max(0.0, deadline - now()) / per_step) if per_step > 0 else MAX_PROFILED_STEPS
        steps = max(floor, min(MAX_PROFILED_STEPS, config.max_samples, affordable))
        before = watch.read()
        sums, why = sampler.kernel_sums(step, steps)
        after = watch.read()
        if sums and before is not None and after is not None:  # one profiler session: one clock for its steps
            watch.sample_clocks[:] = [(before.sm_clock_mhz + after.sm_clock_mhz) / 2.0] * len(sums)
        if not sums:
            notes.append(f"no CUPTI kernel times ({why})")
    if sums:
        taken = Samples(sums, method="cupti", iters_per_sample=1, eager_samples=list(eager.samples), notes=notes)
        StopCriterion(config, stop_rule, deadline, floor, now).is_finished(taken, final=True)
        return taken
    notes.append("timed eager calls between CUDA events (host time included)")
    return replace(eager, method="events", notes=notes)


def measure_device_time(
    time_block: TimeBlock,
    step: Callable[[], object],
    plan: SamplingPlan,
    warm: WarmupResult,
    *,
    iters: int = 1,
    capture: Capture = _default_capture,
    kernel_sums: KernelSums = _default_kernel_sums,
    watch: ClockWatch | None = None,
    now: Callable[[], float] = time.perf_counter,
) -> TimingResult:
    """The record of :class:`DeviceTimeSampler` alone on ``plan`` (``iters`` calls per sample, after ``warm``),
    its instruments entered around the samples: the CUDA path without the loop, for tests."""
    sampler = DeviceTimeSampler(time_block, capture=capture, kernel_sums=kernel_sums, watch=watch, now=now)
    plan = replace(plan, iters=iters, warm=warm)
    with ExitStack() as stack:
        instruments = [stack.enter_context(instrument) for instrument in sampler.instruments()]
        taken = sampler.sample(step, plan)
    return build_record(taken, None, [], instruments)
