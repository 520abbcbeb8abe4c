"""Warm-up until steady state: call the step until its recent calls stop trending, within a budget.

First calls of a step pay one-time costs (lazy initialisation, autotuning, the
allocator mapping fresh pages, a GPU ramping up its clock); a fixed warm-up can
end inside that phase (an elementwise op can run a thousand times slower for its
first hundred calls of a process). :func:`warm_up` times each
call and stops once the median of the latest window of calls is within
``tolerance`` of the window before it (windows grow with the number of calls, so
a slow drift is judged over more calls), after at least ``min_time`` and
``min_calls``; at ``budget`` it stops anyway and says the step did not settle
(``settled=False``), which the judge reports as inconclusive rather than judging
a transient. It also accounts the thread's CPU time against the wall time, so
the loop can tell a step that blocks (sleeps, waits for I/O or other threads)
from one that computes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_gpuperf.stats import median

#: Relative difference of successive window medians below which the step counts as steady.
SETTLE_TOLERANCE = 0.1
#: Fewest calls in a comparison window (windows grow to a quarter of the calls so far).
MIN_WINDOW = 5


@dataclass
class WarmupResult:
    """What warming up found: calls, seconds, whether it settled, the steady per-call time, CPU share."""

    calls: int = 0
    seconds: float = 0.0
    settled: bool = True
    #: Median of the latest window of calls, by the loop's clock (0.0 when the clock read nothing).
    per_call: float = 0.0
    #: Wall seconds per call over the whole warm-up (the calibration's fallback when the clock reads ~0).
    wall_per_call: float = 0.0
    #: Thread CPU seconds over wall seconds not spent waiting for a CPU (None when not tracked).
    cpu_share: float | None = None
    #: Times the thread gave up its CPU to wait (sleep, I/O, a lock) during the warm-up (None when not tracked):
    #: a step that waits does so in every call it waits in, while pure compute that another job delays gets none.
    voluntary_switches: int | None = None
    times: list[float] = field(default_factory=list)
    note: str = ""


def window_size(calls: int) -> int:
    """Calls per comparison window after ``calls`` calls: a quarter of them, at least :data:`MIN_WINDOW`."""
    return max(MIN_WINDOW, calls // 4)


def steady(times: list[float], tolerance: float = SETTLE_TOLERANCE) -> bool | None:
    """Whether the latest window's median is within ``tolerance`` of the previous window's (None: too few calls).

    With fewer than two full windows of calls the later half of the calls is compared with the earlier half;
    with one call there is nothing to compare.
    """
    n = len(times)
    if n < 2:
        return None
    size = window_size(n) if n >= 2 * MIN_WINDOW else n // 2
    latest = median(times[-size:])
    previous = median(times[-2 * size : -size])
    if previous <= 0 or latest <= 0:
        return latest == previous
    return abs(latest / previous - 1.0) <= tolerance


def warm_up(
    time_call: Callable[[], float],
    *,
    min_time: float,
    min_calls: int,
    budget: float,
    tolerance: float = SETTLE_TOLERANCE,
    now: Callable[[], float] = time.perf_counter,
    cpu_now: Callable[[], float] | None = None,
    wait_ns: Callable[[], int | None] | None = None,
    fixed_calls: int | None = None,
) -> WarmupResult:
    """Call ``time_call`` (one timed step call, seconds) until steady or ``budget`` seconds; see the module doc.

    ``cpu_now`` (thread CPU seconds) and ``wait_ns`` (run-queue wait) let the result report the step's CPU share.
    At least one call is made even when ``budget`` is shorter than it. ``fixed_calls`` makes exactly that many
    calls instead (ranks of a distributed step must agree on every count; ``settled`` is then only reported).
    """
    result = WarmupResult()
    start = now()
    cpu0 = cpu_now() if cpu_now else None
    wait0 = wait_ns() if wait_ns else None
    switches0 = voluntary_switches() if cpu_now else None
    if fixed_calls is not None:
        _fixed(result, time_call, fixed_calls, tolerance)
    else:
        _until_steady(result, time_call, start, now, min(min_time, budget), min_calls, budget, tolerance)
    result.calls = len(result.times)
    result.seconds = now() - start
    result.wall_per_call = result.seconds / result.calls
    result.per_call = median(result.times[-window_size(result.calls) :])
    if cpu0 is not None and cpu_now is not None and result.seconds > 0:
        result.cpu_share = _cpu_share(cpu_now, cpu0, result.seconds, wait_ns, wait0)
    switches1 = voluntary_switches() if switches0 is not None else None
    if switches0 is not None and switches1 is not None:
        result.voluntary_switches = switches1 - switches0
    return result


def voluntary_switches() -> int | None:
    """The calling thread's voluntary context switches so far (Linux ``RUSAGE_THREAD``), None elsewhere."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    return None if who is None else int(resource.getrusage(who).ru_nvcsw)


def _fixed(result: WarmupResult, time_call: Callable[[], float], calls: int, tolerance: float) -> None:
    """Exactly ``calls`` calls (at least one); ``settled`` only reported."""
    while True:
        result.times.append(time_call())
        if len(result.times) >= max(1, calls):
            result.settled = steady(result.times, tolerance) is not False
            return


def _until_steady(
    result: WarmupResult,
    time_call: Callable[[], float],
    start: float,
    now: Callable[[], float],
    min_time: float,
    min_calls: int,
    budget: float,
    tolerance: float,
) -> None:
    """Calls until steady (after ``min_calls`` and ``min_time``) or ``budget``; an unsettled end is noted."""
    while True:
        result.times.append(time_call())
        elapsed = now() - start
        enough = len(result.times) >= min_calls and elapsed >= min_time
        verdict = steady(result.times, tolerance) if enough else None
        if verdict:
            return
        if elapsed >= budget:
            result.settled = verdict is not False
            if verdict is None:
                result.note = f"warm-up ran {len(result.times)} call(s), too few to check steadiness"
            else:
                result.note = f"still changing by more than {tolerance:.0%} between windows of calls"
            return


def _cpu_share(
    cpu_now: Callable[[], float],
    cpu0: float,
    seconds: float,
    wait_ns: Callable[[], int | None] | None,
    wait0: int | None,
) -> float:
    """Thread CPU seconds since ``cpu0`` over the ``seconds`` the thread was not waiting for a CPU (at most 1)."""
    waited = 0.0
    wait1 = wait_ns() if wait_ns else None
    if wait0 is not None and wait1 is not None:
        waited = (wait1 - wait0) / 1e9
    running = max(seconds - waited, 1e-9)
    return min(1.0, (cpu_now() - cpu0) / running)


def iters_for(per_call: float, wall_per_call: float, min_sample_time: float, cap: int = 1 << 20) -> int:
    """Calls per sample so one sample lasts ``min_sample_time``: from the clock's per-call time, else the wall's."""
    seconds = per_call if per_call > 0 else wall_per_call
    if seconds <= 0:
        return cap
    return max(1, min(cap, math.ceil(min_sample_time * 1.2 / seconds)))
