"""Device time per step from CUPTI (through torch.profiler): the sum of the step's kernel durations.

Used on CUDA when a step cannot be captured into a CUDA graph. The profiler is
started once per measurement (its start costs seconds: 3.9-6.4 s for the first
20 steps of a process on the H200), ``steps`` eager calls run inside it, each
inside a ``record_function`` range that ends after a device synchronize, and
every GPU activity (kernels, memcpy, memset) is attributed to the range its
start falls in. Overlapping activities on several streams are summed (the
GPU's busy work, not the step's span).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

#: Prefix of the per-step ranges; the profiler also reports them as GPU "user annotation" spans, not work.
RANGE_PREFIX = "gpuperf_step_"


def per_range_sums(ranges: Sequence[tuple[int, int]], activities: Sequence[tuple[int, int]]) -> list[float]:
    """Seconds of device activity per host range.

    ``ranges`` are (start_ns, end_ns) of each step on the host, in order; ``activities`` are (start_ns,
    duration_ns) of device work. An activity belongs to the range its start falls in; others are dropped.
    """
    sums = [0] * len(ranges)
    bounds = sorted((start, end, index) for index, (start, end) in enumerate(ranges))
    for start, duration in activities:
        for low, high, index in bounds:
            if low <= start < high:
                sums[index] += duration
                break
    return [total / 1e9 for total in sums]


def kernel_sums(step: Callable[[], object], steps: int) -> tuple[list[float], str]:
    """Run ``step`` ``steps`` times under one CUDA profiler; (seconds of GPU work per step, "" or why none)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    logging.getLogger("torch.profiler").setLevel(logging.ERROR)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for index in range(steps):
                with record_function(f"{RANGE_PREFIX}{index}"):
                    step()
                    torch.cuda.synchronize()
        events = list(prof.profiler.kineto_results.events())
    except Exception as exc:  # noqa: BLE001 - any profiler failure means "fall back to events"
        return [], f"{type(exc).__name__}: {exc}"
    ranges: dict[int, tuple[int, int]] = {}
    activities = []
    for event in events:
        name = event.name()
        if name.startswith(RANGE_PREFIX):
            if event.device_type().name == "CPU":
                ranges[int(name[len(RANGE_PREFIX) :])] = (event.start_ns(), event.start_ns() + event.duration_ns())
        elif event.device_type().name == "CUDA":
            activities.append((event.start_ns(), event.duration_ns()))
    if len(ranges) != steps:
        return [], f"the profiler reported {len(ranges)} of {steps} step ranges"
    sums = per_range_sums([ranges[i] for i in range(steps)], activities)
    if not any(sums):
        return [], "the profiler saw no GPU activity (CUPTI unavailable?)"
    return sums, ""
