"""Samplers: one strategy per way of timing a step, handed out by the backend (``Backend.sampler``).

A sampler gives the loop its clock for the warm-up (:meth:`Sampler.time_calls`), may change its clock once the
warm-up has shown how the step behaves (:meth:`Sampler.settle`), names the instruments it needs while sampling, and
takes the samples (:meth:`Sampler.sample`) into its own :class:`~pytest_gpuperf.timing.record.Samples`:

* :class:`BlockSampler`: ``iters`` calls timed by one clock (a backend's ``time_block``: device events, or
  sync + host clock), optionally with the heap shifted between samples (:class:`~.layout.HeapLayout`, CPU);
* :class:`ThreadClockSampler`: the calling thread's CPU time (the CPU with one intra-op thread); a step found
  blocking in the warm-up is timed by the wall clock instead (``method`` ``wall``);
* :class:`~pytest_gpuperf.timing.l2_flush.L2FlushSampler`: another sampler's clock, each call after a cache flush;
* :class:`~pytest_gpuperf.timing.cuda.device_time.DeviceTimeSampler`: CUDA graph replay, else CUPTI kernel sums,
  else device events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from pytest_gpuperf.timing.record import Samples
from pytest_gpuperf.timing.sampling import BLOCKING_SHARE, CERTAIN_BLOCKING_SHARE, WAIT_SWITCHES, least_warmup

if TYPE_CHECKING:
    from pytest_gpuperf.timing.layout import HeapLayout
    from pytest_gpuperf.timing.record import Instrument
    from pytest_gpuperf.timing.sampling import MeasureConfig, SamplingPlan
    from pytest_gpuperf.timing.warmup import WarmupResult

#: A clock: seconds of ``iters`` back-to-back calls of a step.
TimeBlock = Callable[[Callable[[], object], int], float]


class Sampler(Protocol):
    """One way of timing a step (module doc)."""

    #: How the samples are timed (``TimingResult.method``) unless :meth:`sample` finds otherwise.
    method: str
    #: The thread's CPU clock, for the warm-up's CPU share (None: not tracked).
    cpu_now: Callable[[], float] | None

    def time_calls(self, step: Callable[[], object], iters: int) -> float:
        """Seconds of ``iters`` calls by this sampler's clock (the warm-up's clock)."""
        ...

    def warmup_seconds(self, config: MeasureConfig) -> float:
        """Least seconds of warm-up before this sampler's samples."""
        ...

    def settle(self, warm: WarmupResult, config: MeasureConfig) -> tuple[Sampler, float, str]:
        """After the warm-up: (the sampler to sample with, its per-call seconds, a note on a change of clock)."""
        ...

    def instruments(self) -> Sequence[Instrument]:
        """Instruments to enter around the samples (their facts go into the record)."""
        ...

    def sample(self, step: Callable[[], object], plan: SamplingPlan) -> Samples:
        """Take the samples of ``step`` the plan asks for."""
        ...


class TimedBackend(Protocol):
    """What the loop asks of a backend (:class:`pytest_gpuperf.backends.base.Backend`)."""

    def sampler(self, config: MeasureConfig) -> Sampler:
        """The sampler that times this backend's steps."""
        ...

    def instruments(self, config: MeasureConfig) -> Sequence[Instrument]:
        """Instruments held over the whole measurement, warm-up included."""
        ...


def thread_time_block(step: Callable[[], object], iters: int) -> float:
    """CPU seconds the calling thread spent in ``iters`` calls (time other processes took is not counted)."""
    start = time.thread_time()
    for _ in range(iters):
        step()
    return time.thread_time() - start


class BlockSampler:
    """``iters`` calls per sample timed by ``clock``, divided by ``iters``; the heap shifted between samples when
    ``layout`` is given."""

    def __init__(
        self,
        clock: TimeBlock,
        method: str = "events",
        *,
        cpu_now: Callable[[], float] | None = None,
        layout: HeapLayout | None = None,
    ) -> None:
        self.clock, self.method, self.cpu_now, self.layout = clock, method, cpu_now, layout

    def time_calls(self, step: Callable[[], object], iters: int) -> float:
        """Seconds of ``iters`` calls by :attr:`clock`."""
        return self.clock(step, iters)

    def warmup_seconds(self, config: MeasureConfig) -> float:
        """``warmup_time``, stretched to the GPU's clock ramp (``gpu_ramp``)."""
        return least_warmup(config)

    def settle(self, warm: WarmupResult, config: MeasureConfig) -> tuple[Sampler, float, str]:
        """The same clock at the warm-up's steady per-call time."""
        return self, warm.per_call, ""

    def instruments(self) -> Sequence[Instrument]:
        """The heap layout shift when on."""
        return [self.layout] if self.layout is not None else []

    def sample(self, step: Callable[[], object], plan: SamplingPlan) -> Samples:
        """Samples of ``plan.iters`` calls each, through the plan's contention guard."""
        clock, iters = self.clock, plan.iters

        def take() -> float:
            return clock(step, iters) / iters

        if self.layout is not None:
            take = self.layout.shifted(take)
        taken = Samples(method=self.method, iters_per_sample=iters)
        plan.sample(take, taken)
        return taken


def blocking_note(cpu_share: float, pinned: bool = False) -> str:
    """The ``method_note`` of a CPU step timed by the wall clock because it blocks (waits); ``pinned``: its
    baseline was timed by the thread clock."""
    note = (
        f"the step blocks: its thread computed for {cpu_share:.1%} of the warm-up's wall time, under "
        f"{BLOCKING_SHARE:.0%} (sleep, I/O, a lock, worker threads or a collective); timed by the wall clock, which "
        "counts the waiting"
    )
    if pinned:
        note += (
            "; its baseline was timed by the thread clock, so waiting added since shows as a slowdown (if the step "
            "waited as much when it was recorded, re-record it)"
        )
    return note


def waits(warm: WarmupResult) -> bool:
    """Whether the warm-up shows a step that waits: a CPU share under :data:`CERTAIN_BLOCKING_SHARE`, or under
    :data:`BLOCKING_SHARE` with the thread giving up its CPU in a tenth of the calls (:data:`WAIT_SWITCHES`)."""
    share = warm.cpu_share
    if share is None or share >= BLOCKING_SHARE:
        return False
    if share < CERTAIN_BLOCKING_SHARE:
        return True
    switches = warm.voluntary_switches  # None off Linux: the band is left to the thread clock
    return switches is not None and switches >= max(2, WAIT_SWITCHES * warm.calls)


class ThreadClockSampler(BlockSampler):
    """The calling thread's CPU time (one intra-op thread runs every op of the step in it, so it is the step's own
    cost); ``wall`` (the backend's ``time_block``) takes over for a step that blocks (``cpu_clock`` auto)."""

    def __init__(self, wall: TimeBlock, *, layout: HeapLayout | None = None) -> None:
        super().__init__(thread_time_block, "thread_cpu", cpu_now=time.thread_time, layout=layout)
        self.wall = wall

    def settle(self, warm: WarmupResult, config: MeasureConfig) -> tuple[Sampler, float, str]:
        """A step that waits in the warm-up (:func:`waits`) blocks: timed by the
        wall clock under ``cpu_clock`` auto (the thread clock chosen by a baseline's method included:
        ``wall_when_waiting``), else still by the thread clock with a note of what it misses."""
        share = warm.cpu_share
        if share is None or not waits(warm):
            return self, warm.per_call, ""
        if config.cpu_clock == "auto" or config.wall_when_waiting:
            wall = BlockSampler(self.wall, "wall", cpu_now=self.cpu_now, layout=self.layout)
            return wall, 0.0, blocking_note(share, pinned=config.cpu_clock != "auto")
        return (
            self,
            warm.per_call,
            (
                f"the step blocks (its thread computed for {share:.1%} of the wall time) but "
                "gpuperf_cpu_clock=thread counts only its CPU time: waiting is not in these numbers"
            ),
        )
