"""Device time per step from CUPTI (through torch.profiler): the sum of the step's kernel durations.

Used on CUDA when a step cannot be captured into a CUDA graph. The profiler is
started once per measurement (its start costs seconds in a fresh process),
``steps`` eager calls run inside it, each
inside a ``record_function`` range that ends after a device synchronize, and
every GPU activity (kernels, memcpy, memset) is attributed to the range its
start falls in. Overlapping activities on several streams are summed (the
GPU's busy work, not the step's span).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

#: Prefix of the per-step ranges.
RANGE_PREFIX = "gpuperf_step_"
#: Kineto activity types that are GPU work. Not ``gpu_user_annotation``: every ``record_function`` range (ours,
#: and torch's own such as ``Optimizer.step#AdamW.step``) also appears on the GPU timeline spanning its kernels,
#: and counting those would about double an optimizer step's time.
DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

#: One profiler event as (name, device type name, activity type, start ns, duration ns).
Event = tuple[str, str, str, int, int]


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


def step_ranges_and_work(events: Sequence[Event]) -> tuple[dict[int, tuple[int, int]], list[tuple[int, int]]]:
    """The host ranges of our steps by index, and the (start, duration) of every piece of GPU work.

    GPU work is a CUDA event of a :data:`DEVICE_WORK` activity type; where torch does not report activity
    types (torch 2.11's ``_KinetoEvent`` has no ``activity_type``), a CUDA event whose name is also a CPU
    event's name is taken for the GPU span of a ``record_function`` range and skipped.
    """
    ranges: dict[int, tuple[int, int]] = {}
    cpu_names = {name for name, device, _, _, _ in events if device == "CPU"}
    work = []
    for name, device, activity, start, duration in events:
        if device == "CPU" and name.startswith(RANGE_PREFIX) and name[len(RANGE_PREFIX) :].isdigit():
            ranges[int(name[len(RANGE_PREFIX) :])] = (start, start + duration)
        elif device == "CUDA" and (activity in DEVICE_WORK if activity else name not in cpu_names):
            work.append((start, duration))
    return ranges, work


def profiled_events(prof: Any) -> list[Event]:
    """The events of a finished ``torch.profiler.profile`` as :data:`Event` tuples."""
    return [
        (e.name(), e.device_type().name, _activity_type(e), e.start_ns(), e.duration_ns())
        for e in prof.profiler.kineto_results.events()
    ]


def _activity_type(event: object) -> str:
    """The kineto activity type of a profiler event ("" where this torch does not say)."""
    getter = getattr(event, "activity_type", None)
    return str(getter()) if callable(getter) else ""


def kernel_sums(step: Callable[[], object], steps: int) -> tuple[list[float], str]:
    """Run ``step`` ``steps`` times under one CUDA profiler; (seconds of GPU work per step, "" or why none)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    logging.getLogger("torch.profiler").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle"
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for index in range(steps):
                    with record_function(f"{RANGE_PREFIX}{index}"):
                        step()
                        torch.cuda.synchronize()
            events = profiled_events(prof)
    except Exception as exc:  # noqa: BLE001 - any profiler failure means "fall back to events"
        return [], f"{type(exc).__name__}: {exc}"
    ranges, activities = step_ranges_and_work(events)
    if len(ranges) != steps:
        return [], f"the profiler reported {len(ranges)} of {steps} step ranges"
    sums = per_range_sums([ranges[i] for i in range(steps)], activities)
    if not any(sums):
        return [], "the profiler saw no GPU activity (CUPTI unavailable?)"
    return sums, ""
