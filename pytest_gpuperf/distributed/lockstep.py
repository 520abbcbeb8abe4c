"""``gpuperf.measure()`` inside a distributed body: every rank calls the step equally often.

The core's measuring loop decides on its own clock how many warm-up calls, iterations
per sample and samples to take. On N ranks each rank would decide alone, and a step
with collectives inside (FSDP's all-gathers and reduce-scatters) then deadlocks: the
rank that stopped sampling first leaves the others waiting in a collective it never
enters. Here every decision is made from values all ranks share:

* each timed block's seconds are the slowest rank's (an all-reduce MAX after the
  block, outside the timed region), so calibration, precision and stop rules agree;
* warm-up is a fixed number of calls (``min_warmup_calls``), never a time;
* the time budget becomes a sample count, fixed before sampling from the slowest
  rank's time per call (``max_time / time per call``, between ``min_samples`` and
  ``max_samples``), because ranks' wall clocks differ;
* wall-clock timing (``cpu_clock="wall"``: a rank's thread CPU time misses the time
  it waits in collectives) and no CUDA-graph capture of collectives.

Per-rank ``<step>.time`` is therefore the slowest rank's; per-rank peak memory stays
each rank's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.fixture import GpuPerf

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import MeasureInstead
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.timing import MeasureConfig
    from pytest_gpuperf.timing.samplers import Sampler


def agree_max(value: float, device: Any) -> float:
    """The largest ``value`` over all ranks of the default process group (itself when none is joined)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


class LockstepBackend:
    """A backend whose ``time_block`` returns the slowest rank's seconds; everything else is the wrapped one's."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Time ``iters`` calls on this rank, then agree on the slowest rank's time."""
        return agree_max(self._backend.time_block(step, iters), self._backend.device())

    def sampler(self, config: MeasureConfig) -> Sampler:
        """The wrapped backend's sampler, its clock agreeing on the slowest rank's time as :meth:`time_block` does.

        The wrapped backend builds its sampler around its own ``time_block``: left so, each rank's samples were its
        own, and a rank whose samples reached the target precision first stopped sampling while the others waited in
        the step's next collective (a hang).
        """
        sampler = self._backend.sampler(config)
        clock = getattr(sampler, "clock", None)
        if clock is not None:
            device = self._backend.device()
            sampler.clock = lambda step, iters: agree_max(clock(step, iters), device)
        return sampler


def lockstep_config(config: MeasureConfig, seconds_per_call: float) -> MeasureConfig:
    """``config`` with every clock-based decision replaced by a count all ranks share."""
    per_sample = max(seconds_per_call, config.min_sample_time, 1e-9)
    samples = int(config.max_time / per_sample) if math.isfinite(config.max_time) else config.max_samples
    return replace(
        config,
        warmup_time=0.0,
        lockstep=True,  # every decision a count (timing.sampling.counted); no time budget either:
        max_time=math.inf,
        max_samples=max(config.min_samples, min(config.max_samples, samples)),
        cpu_clock="wall",
        cuda_graph="off",
    )


def lockstep_handle(context: TestContext, judging: Judging | None, instead: MeasureInstead | None = None) -> GpuPerf:
    """The ``gpuperf`` handle of a rank: the core's, on a :class:`LockstepBackend`, with lockstep settings.

    Before each step is planned, two calls are timed (the slowest rank's second call sizes the
    sample count, see :func:`lockstep_config`). ``instead``: the task's stand-in for measuring
    (``RankTask.measure_instead``), asked before any of that.
    """
    backend = LockstepBackend(context.backend)

    def agreed_config(config: MeasureConfig, step: Callable[[], object]) -> MeasureConfig:
        backend.time_block(step, 1)
        return lockstep_config(config, backend.time_block(step, 1))

    lockstep_context = replace(context, backend=backend)
    return GpuPerf(lockstep_context, judging, adjust_config=agreed_config, instead=instead)  # type: ignore[arg-type]
