"""The host CPU's speed class: a fixed calibration kernel measured once per process, stored with each baseline.

A fingerprint's model name does not tell two VMs of one kind apart: an unchanged perf suite can read half
the committed speed on a fresh VM of the same kind, and every time verdict would fail. So each process that
judges or records host-CPU timings first times a **fixed, pure-compute torch kernel** (:data:`KERNEL`: a
128 x 128 fp32 matmul on one thread, :data:`CALLS` calls per repeat, :data:`REPEATS` repeats, a fraction of a
second) before any test runs, and keeps

* ``calibration``: the :data:`QUANTILE` quantile of its seconds per call (a low quantile: a repeat slowed
  by a neighbour or by the VM's slower moments only ever reads slower), and
* ``calibration_spread``: the :data:`SPREAD_QUANTILE` quantile over that one, minus 1 (how sure that low
  quantile is).

Both clocks are read in every repeat, so a timing metric carries the calibration of the clock it was
timed with (thread CPU time for ``thread_cpu``, the wall clock otherwise), and a recorded timing entry
stores its process's two numbers (:data:`FACTS`); :mod:`pytest_gpuperf.judging.machine_rule` compares
them. The calibration runs before the tests, so a test's own regression cannot slow it: on the machine
that recorded, a slower step is still judged. CUDA timings are left to their clock evidence (SM clocks);
a CPU Vulkan adapter (lavapipe) is host-CPU-like and uses this calibration.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

#: What the calibration times (stored nowhere: a new kernel needs new field names, see :data:`FACTS`).
KERNEL = "a 128x128 fp32 matmul on one thread"
#: Kernel size, calls per timed repeat, repeats, and warm-up calls before the first repeat.
SIZE, CALLS, REPEATS, WARMUP_CALLS = 128, 100, 48, 50
#: The quantile of the repeats' seconds per call that is the calibration value.
QUANTILE = 0.1
#: The spread is this quantile over the calibration's: how far the low quantile's neighbourhood reaches (a
#: calibration that caught both of a VM's speed states keeps its fast value; its median would be the slow one).
SPREAD_QUANTILE = 0.25
#: The fields a timing entry stores (read back by :func:`pytest_gpuperf.judging.machine_rule.machine_change`).
FACTS = ("calibration", "calibration_spread")
#: Environment variable that pins the calibration (seconds per call) instead of measuring it: for a test suite
#: whose processes must all read one value (this project's own end-to-end tests), never for judging a runner.
PIN_ENV = "GPUPERF_PIN_CALIBRATION"
#: ``method`` values timed by the thread's CPU time (every other method is a wall clock of some kind).
THREAD_METHODS = ("thread_cpu",)


@dataclass(frozen=True)
class Calibration:
    """One process's calibration: seconds per kernel call (low quantile) and spread, per clock."""

    thread: float
    thread_spread: float
    wall: float
    wall_spread: float
    #: Wall seconds the calibration took.
    cost: float
    #: The :data:`PIN_ENV` setting this calibration was read from ("" when measured).
    pinned: str = ""

    def facts(self, method: str) -> dict[str, float | str]:
        """The fields a timing metric timed with ``method`` carries: the calibration under the same clock (stored
        with a recording), the other clock's (``calibration_other``, never stored: the machine rule tells a busy
        machine from another one by it) and, when pinned, ``calibration_pinned`` (the setting, named in verdicts)."""
        if method in THREAD_METHODS:
            value, spread, other = self.thread, self.thread_spread, self.wall
        else:
            value, spread, other = self.wall, self.wall_spread, self.thread
        facts: dict[str, float | str] = {
            "calibration": float(f"{value:.4g}"),
            "calibration_spread": round(spread, 3),
            "calibration_other": float(f"{other:.4g}"),
        }
        if self.pinned:
            facts["calibration_pinned"] = f"{PIN_ENV}={self.pinned}"
        return facts


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def summarize(thread: list[float], wall: list[float], cost: float = 0.0) -> Calibration:
    """A :class:`Calibration` from per-repeat seconds per call under each clock."""

    def pair(values: list[float]) -> tuple[float, float]:
        low = _quantile(values, QUANTILE)
        return low, max(0.0, _quantile(values, SPREAD_QUANTILE) / low - 1.0) if low > 0 else 0.0

    (t_low, t_spread), (w_low, w_spread) = pair(thread), pair(wall)
    return Calibration(t_low, t_spread, w_low, w_spread, cost)


def measure_calibration(repeats: int = REPEATS, calls: int = CALLS, size: int = SIZE) -> Calibration:
    """Time the fixed kernel (one torch thread, random inputs, a preallocated output) and summarize it."""
    import torch

    from pytest_gpuperf.procs.cpu_lock import serialised
    from pytest_gpuperf.timing.threads import measuring_threads

    started = time.perf_counter()
    generator = torch.Generator(device="cpu").manual_seed(20261201)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    out = torch.empty(size, size)
    thread, wall = [], []
    # the kernel times the host CPU: under xdist, one worker at a time (pytest_gpuperf.procs.cpu_lock)
    with measuring_threads(1), torch.inference_mode(), serialised(True):
        for _ in range(WARMUP_CALLS):
            torch.mm(a, b, out=out)
        for _ in range(repeats):
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                torch.mm(a, b, out=out)
            wall1, cpu1 = time.perf_counter(), time.thread_time()
            thread.append((cpu1 - cpu0) / calls)
            wall.append((wall1 - wall0) / calls)
    return summarize(thread, wall, time.perf_counter() - started)


def host_calibration() -> Calibration:
    """A fresh calibration of this host: measured, or the value pinned in :data:`PIN_ENV` (spread 1%)."""
    pinned = os.environ.get(PIN_ENV, "").strip()
    if not pinned:
        return measure_calibration()
    from pytest_gpuperf.validate import positive_number

    try:
        value = float(positive_number(float(pinned), PIN_ENV))  # refuses 0, negatives, inf and nan
    except ValueError:  # not a number (float()), or not a positive finite one (NumberError)
        raise ValueError(
            f"{PIN_ENV}={pinned!r}: expected a positive, finite number of seconds per calibration call, e.g. 3e-05"
        ) from None
    return Calibration(value, 0.01, value, 0.01, 0.0, pinned=pinned)


_process: list[Calibration | None] = [None]
_enabled: list[bool] = [True]


def process_calibration() -> Calibration | None:
    """This process's calibration, measured on the first call (the session measures it before its tests).

    None when switched off for this process (:func:`set_enabled`: an A/B worker, whose times are judged
    against the other side's on the same machine).
    """
    if not _enabled[0]:
        return None
    if _process[0] is None:
        _process[0] = host_calibration()
    return _process[0]


def set_enabled(enabled: bool) -> None:
    """Calibrate this process or not (off: its timings are never judged against a stored baseline)."""
    _enabled[0] = bool(enabled)


def set_process_calibration(calibration: Calibration | None) -> None:
    """Replace this process's calibration (tests inject one; None measures again on the next use)."""
    _process[0] = calibration


def pinned_setting() -> str | None:
    """``GPUPERF_PIN_CALIBRATION=<value>`` when this process's calibration is pinned, else None (never measures)."""
    current = _process[0]
    return f"{PIN_ENV}={current.pinned}" if current is not None and current.pinned else None


def measured() -> Calibration | None:
    """This process's calibration if it was measured, else None (never measures)."""
    return _process[0]
