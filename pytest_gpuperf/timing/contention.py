"""Contention of the measuring thread: run-queue wait per sample, CPU pressure, retakes.

A sample taken while the measuring thread sat in the run queue (another process
held its core) times the neighbours, not the step. Linux counts that wait per
thread in ``/proc/self/task/<tid>/schedstat`` (second field, nanoseconds); the
share of a sample's wall time spent waiting says how contended it was.
:class:`ContentionGuard` reads it around every sample, retakes a sample whose
wait share exceeds :data:`WAIT_SHARE_LIMIT` (a bounded number of times), and
summarises what it saw, with ``/proc/pressure/cpu`` (``some avg10``) for the
whole machine, so the judge can call a run that stayed contended inconclusive
instead of judging its neighbours' load. Where the files are absent (not Linux,
no PSI) the guard passes samples through and says so (``available: False``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pytest_gpuperf.stats import median

#: The guard's name among a timing record's instruments (``TimingResult.contention`` reads it).
INSTRUMENT = "contention"

#: A sample whose measuring thread waited in the run queue for more than this share of its wall time is contended.
WAIT_SHARE_LIMIT = 0.1
#: The run is called contended when more than this share of its kept samples were contended (the judged low
#: quantile would then come from a contended sample).
CONTENDED_FRACTION = 0.5


def parse_schedstat(text: str) -> int:
    """Run-queue wait in ns: the second field of a ``schedstat`` line (``run_ns wait_ns timeslices``)."""
    fields = text.split()
    if len(fields) < 2 or not fields[1].isdigit():
        raise ValueError(f"not a schedstat line: {text!r}")
    return int(fields[1])


def parse_cpu_pressure(text: str) -> float:
    """``some avg10`` of ``/proc/pressure/cpu``: percent of the last 10 s in which a runnable task waited for a CPU."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            for part in parts[1:]:
                key, _, value = part.partition("=")
                if key == "avg10":
                    return float(value)
    raise ValueError(f"no 'some avg10=' in CPU pressure text: {text!r}")


def thread_wait_reader(tid: int | None = None, proc: Path = Path("/proc")) -> Callable[[], int | None]:
    """A reader of thread ``tid``'s run-queue wait in ns (default: the calling thread; None when unreadable)."""
    path = proc / "self" / "task" / str(tid if tid is not None else threading.get_native_id()) / "schedstat"

    def read() -> int | None:
        try:
            return parse_schedstat(path.read_text())
        except (OSError, ValueError):
            return None

    return read


def process_wait_reader(proc: Path = Path("/proc")) -> Callable[[], int | None]:
    """A reader of the run-queue wait in ns summed over every thread of this process (None when unreadable).

    For a device whose work runs on worker threads of the process (a CPU Vulkan adapter such as lavapipe, whose
    rasterizer threads do the step while the calling thread waits on a fence): the calling thread sleeps, so its
    own wait says nothing, while the workers wait for the cores that neighbours hold. A thread that ends between
    two readings takes its wait with it; the guard clamps a negative difference to 0.
    """
    tasks = proc / "self" / "task"

    def read() -> int | None:
        total, seen = 0, False
        try:
            names = [entry.name for entry in tasks.iterdir()]
        except OSError:
            return None
        for name in names:
            try:
                total += parse_schedstat((tasks / name / "schedstat").read_text())
                seen = True
            except (OSError, ValueError):
                continue  # the thread ended after the listing
        return total if seen else None

    return read


def read_cpu_pressure(path: Path = Path("/proc/pressure/cpu")) -> float | None:
    """The machine's CPU pressure (``some avg10``, percent), None where PSI is not available."""
    try:
        return parse_cpu_pressure(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class ContentionGuard:
    """Times samples through :meth:`take`, retaking those the measuring thread spent waiting for a CPU.

    ``read_wait`` returns the thread's cumulated run-queue wait in ns (None: unknown), ``clock_ns`` the wall
    clock in ns; both are injectable for tests. ``max_retakes`` bounds the retakes of the whole run and
    ``may_retake`` (the loop's budget) can refuse one. An instrument: its facts are its summary at exit.
    """

    read_wait: Callable[[], int | None] = field(default_factory=thread_wait_reader)
    read_pressure: Callable[[], float | None] = read_cpu_pressure
    clock_ns: Callable[[], int] = time.perf_counter_ns
    limit: float = WAIT_SHARE_LIMIT
    max_retakes: int = 30
    retaken: int = 0
    shares: list[float] = field(default_factory=list)
    pressures: list[float] = field(default_factory=list)
    available: bool = True
    #: Whose wait ``read_wait`` reads: the measuring thread's or the whole process's (said in the summary).
    scope: str = "thread"
    #: Its name among a timing record's instruments.
    name: ClassVar[str] = INSTRUMENT
    _facts: dict[str, object] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.available = self.read_wait() is not None
        self._note_pressure()

    def _note_pressure(self) -> None:
        value = self.read_pressure()
        if value is not None:
            self.pressures.append(value)

    def share_of(self, sample: Callable[[], float]) -> tuple[float, float | None]:
        """Take one sample; return (its value, the share of its wall time the thread waited; None if unknown)."""
        wait0, wall0 = self.read_wait(), self.clock_ns()
        value = sample()
        wall1, wait1 = self.clock_ns(), self.read_wait()
        if wait0 is None or wait1 is None or wall1 <= wall0:
            return value, None
        return value, max(0.0, (wait1 - wait0) / (wall1 - wall0))

    def take(self, sample: Callable[[], float], may_retake: Callable[[], bool] = lambda: True) -> float:
        """One sample, retaken while contended (within ``max_retakes`` and ``may_retake``); its share is kept."""
        while True:
            value, share = self.share_of(sample)
            if share is None:
                return value
            if share > self.limit and self.retaken < self.max_retakes and may_retake():
                self.retaken += 1
                continue
            self.shares.append(share)
            return value

    def __enter__(self) -> ContentionGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self._facts = self.summary()

    def facts(self) -> dict[str, object]:
        """The :meth:`summary` taken when the guarded measurement ended (instrument contract)."""
        return self._facts if self._facts is not None else self.summary()

    def summary(self) -> dict[str, object]:
        """What the guard saw: retakes, contended samples kept, wait shares, CPU pressure, the overall flag."""
        self._note_pressure()
        contended = sum(1 for s in self.shares if s > self.limit)
        fraction = contended / len(self.shares) if self.shares else 0.0
        return {
            "available": self.available,
            "wait_share_limit": self.limit,
            "retaken": self.retaken,
            "contended_samples": contended,
            "contended_fraction": round(fraction, 4),
            "median_wait_share": round(median(self.shares), 4) if self.shares else 0.0,
            "max_wait_share": round(max(self.shares), 4) if self.shares else 0.0,
            "cpu_pressure_avg10": max(self.pressures) if self.pressures else None,
            "contended": fraction > CONTENDED_FRACTION,
            "wait_scope": self.scope,
        }
