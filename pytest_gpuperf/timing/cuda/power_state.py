"""Warm a CUDA step up to the GPU's sustained power state before its samples are taken.

Under a large GEMM a GPU reaches its power cap within about a second, and its SM clock then settles below the
clock it ran at in the first tenths of a second, while NVML's power (a moving average) still climbs
(``gpu/clock_traces.py`` traces it; ``docs/PERFORMANCE.md`` has the figures). Samples taken inside that transient
are faster than the ones after it. So before sampling, the step's graph is replayed in windows of :data:`WINDOW`
seconds while NVML is read after each replay, until two consecutive windows agree: SM clock within
:data:`CLOCK_STEADY` and power within :data:`POWER_STEADY`, capped or not yet (the clock holds at boost for the
first tenths of a second while the power still climbs). A step that never reaches the cap (memory- or
latency-bound) settles as soon as its clock and power hold. The budget bounds it; what it found (the sustained
clock, how long it took, whether it settled) goes into the record through :class:`PowerWarmup`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.stats import median
from pytest_gpuperf.timing.cuda.nvml import POWER_CAP_MASK, ClockReading
from pytest_gpuperf.timing.record import POWER_STATE

#: One observation window of the warm-up (seconds).
WINDOW = 0.1
#: Consecutive windows whose median SM clocks differ by at most this (relative) hold the clock.
CLOCK_STEADY = 0.01
#: ... and whose median power readings differ by at most this (relative) hold the power (power-capped GPUs).
POWER_STEADY = 0.02


@dataclass(frozen=True)
class PowerState:
    """What the power warm-up found: seconds spent, whether it settled, the sustained SM clock and power."""

    seconds: float
    settled: bool
    sm_clock_mhz: float | None
    power_w: float | None
    power_capped: bool

    def facts(self) -> dict[str, object]:
        """Scalar facts for the timing record."""
        out: dict[str, object] = {"power_warmup_seconds": round(self.seconds, 3), "power_settled": self.settled}
        if self.sm_clock_mhz is not None:
            out["sustained_sm_clock_mhz"] = round(self.sm_clock_mhz, 1)
        if self.power_w is not None:
            out["sustained_power_w"] = round(self.power_w, 1)
        return out


def _steady(previous: tuple[float, float, int], current: tuple[float, float, int]) -> bool:
    """Two windows hold the state: SM clock within :data:`CLOCK_STEADY`, power within :data:`POWER_STEADY`.

    The power is checked whether or not the cap is reported yet: in the first tenths of a second of a large GEMM
    the GPU still reads its boost clock, uncapped, while NVML's power (a moving average) climbs towards the cap;
    settling on the clock alone there lets processes measure at clocks far apart.
    """
    (clock0, power0, _), (clock1, power1, reasons) = previous, current
    if clock0 <= 0 or abs(clock1 / clock0 - 1.0) > CLOCK_STEADY:
        return False
    if power0 <= 0 or power1 <= 0:
        return not reasons & POWER_CAP_MASK  # no power reading: a capped GPU cannot show it holds
    return abs(power1 / power0 - 1.0) <= POWER_STEADY


def warm_to_sustained(
    replay: Callable[[], object],
    read: Callable[[], ClockReading],
    budget: float,
    now: Callable[[], float] = time.perf_counter,
) -> PowerState:
    """Replay until the SM clock (and, when capped, the power) holds for two windows, within ``budget`` seconds."""
    start = now()
    windows: list[tuple[float, float, int]] = []
    capped = False
    while now() - start < budget:
        opened, clocks, powers, reasons = now(), [], [], 0
        while True:
            replay()
            reading = read()
            clocks.append(float(reading.sm_clock_mhz))
            powers.append(reading.power_w)
            reasons |= reading.reasons
            if now() - opened >= WINDOW or now() - start >= budget:
                break
        capped = capped or bool(reasons & POWER_CAP_MASK)
        windows.append((median(clocks), median(powers), reasons))
        if len(windows) >= 2 and _steady(windows[-2], windows[-1]):
            clock, power, _ = windows[-1]
            return PowerState(now() - start, True, clock, power or None, capped)
    last = windows[-1] if windows else None
    return PowerState(now() - start, False, last[0] if last else None, (last[1] or None) if last else None, capped)


class PowerWarmup:
    """Instrument of the CUDA sampler: holds what :func:`warm_to_sustained` found (none when it did not run) and
    the least seconds of samples it then asked for (at the power cap)."""

    name = POWER_STATE

    def __init__(self) -> None:
        self.state: PowerState | None = None
        self.min_sample_seconds: float | None = None

    def __enter__(self) -> PowerWarmup:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def facts(self) -> dict[str, Any]:
        """:meth:`PowerState.facts` and ``min_sample_seconds``; {} when the warm-up did not run."""
        if self.state is None:
            return {}
        out: dict[str, Any] = dict(self.state.facts())
        if self.min_sample_seconds is not None:
            out["min_sample_seconds"] = self.min_sample_seconds
        return out
