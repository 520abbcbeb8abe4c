"""The ncu session's time budget (ini key ``gpuperf_ncu_timeout``), kept on both sides of the ncu child.

ncu writes its CSV only when the profiled process ends, so a child killed at the deadline loses every window it
captured. The budget is therefore kept in two places:

* the child (:class:`Budget`) reads the session's deadline from a file the parent writes when it releases the child
  (:func:`write_deadline`), opens no window once less than :data:`STOP_MARGIN_SECONDS` remain, and none whose
  replays would not fit (its kernels at the seconds per kernel seen so far); it then ends its pytest normally, so
  ncu writes the windows it did capture;
* the parent, as a backstop when the deadline passes anyway (:func:`interrupt_then_stop`): ``SIGINT`` to the
  child's Python process (never to ncu), :data:`INTERRUPT_GRACE_SECONDS` for it and ncu to end, then the guard's
  whole process group is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The files next to the child's manifest: the session's deadline (epoch seconds) and the child's pid.
DEADLINE_FILE, PID_FILE = "deadline", "child.pid"
#: Below this many seconds left, the child opens no more windows (its pytest and ncu still have to end).
STOP_MARGIN_SECONDS = 5.0
#: A window's cost before any was seen: fixed seconds (the warm and ranking calls) and seconds per replayed kernel.
WINDOW_FIXED_SECONDS = 1.0
SECONDS_PER_KERNEL = 0.5
#: Seconds the parent waits after interrupting the child before it kills the guard's process group.
INTERRUPT_GRACE_SECONDS = 3.0
#: The words every budget skip starts with (the parent's skip reason quotes them).
NOT_CAPTURED = "not captured: budget"


def write_deadline(folder: Path, at: float, total: float) -> None:
    """Write the deadline (``time.time()`` seconds) and the budget's seconds into the child's folder, atomically."""
    temporary = folder / (DEADLINE_FILE + ".tmp")
    temporary.write_text(f"{at!r} {total!r}", encoding="utf-8")
    os.replace(temporary, folder / DEADLINE_FILE)


def read_deadline(folder: Path) -> tuple[float, float] | None:
    """The deadline and the budget's seconds the parent wrote, or None (no budget known)."""
    try:
        at, total = (float(word) for word in (folder / DEADLINE_FILE).read_text(encoding="utf-8").split())
    except (OSError, ValueError):
        return None
    return at, total


@dataclass
class Budget:
    """The child's view of the session's deadline; ``clock`` is ``time.time`` (injected in tests)."""

    deadline: float | None
    total: float = 0.0
    clock: Callable[[], float] = time.time
    margin: float = STOP_MARGIN_SECONDS
    #: (seconds, kernels) of each window captured so far.
    seen: list[tuple[float, int]] = field(default_factory=list)

    @classmethod
    def of(cls, folder: Path) -> Budget:
        """The budget of the child whose files are in ``folder`` (none when the parent wrote no deadline)."""
        written = read_deadline(folder)
        return cls(None) if written is None else cls(*written)

    def reread(self, folder: Path) -> None:
        """Take the deadline the parent last wrote (it may have shortened it, or written it after this started)."""
        written = read_deadline(folder)
        if written is not None:
            self.deadline, self.total = written

    def remaining(self) -> float:
        """Seconds until the deadline (infinite without one)."""
        return float("inf") if self.deadline is None else self.deadline - self.clock()

    def seconds_per_kernel(self) -> float:
        """Seconds one replayed kernel has cost in this session's windows (:data:`SECONDS_PER_KERNEL` before)."""
        kernels = sum(k for _, k in self.seen if k > 0)
        if not kernels:
            return SECONDS_PER_KERNEL
        spent = sum(max(s - WINDOW_FIXED_SECONDS, 0.0) for s, k in self.seen if k > 0)
        return max(spent / kernels, 0.05)

    def estimate(self, kernels: int) -> float:
        """Seconds a window of ``kernels`` replayed kernels is expected to take."""
        return WINDOW_FIXED_SECONDS + kernels * self.seconds_per_kernel()

    def stop_reason(self) -> str:
        """Why no further window opens ("" while at least the margin remains)."""
        left = self.remaining()
        if left >= self.margin:
            return ""
        return (
            f"{NOT_CAPTURED} (the ncu child stopped opening windows with {max(left, 0.0):.0f} s of the session's "
            f"{self._total()} left; ini key gpuperf_ncu_timeout)"
        )

    def window_reason(self, kernels: int) -> str:
        """Why a window of ``kernels`` kernels is not opened: it would not end before the margin ("" if it fits)."""
        left = self.remaining() - self.margin
        needed = self.estimate(kernels)
        if kernels <= 0 or needed <= left:
            return ""
        return (
            f"{NOT_CAPTURED} (its window of {kernels} kernel(s) needs about {needed:.0f} s of ncu replays, "
            f"{max(left, 0.0):.0f} s of the session's {self._total()} were left; ini key gpuperf_ncu_timeout)"
        )

    def learn(self, seconds: float, kernels: int) -> None:
        """Note a captured window's seconds and kernels."""
        self.seen.append((seconds, kernels))

    def _total(self) -> str:
        return f"{self.total:.0f} s budget" if self.total else "budget"


def write_pid(folder: Path) -> None:
    """In the child: name this process (the parent interrupts it, not ncu, at the deadline)."""
    (folder / PID_FILE).write_text(str(os.getpid()), encoding="utf-8")


def read_pid(folder: Path) -> int | None:
    """The child's pid, or None when it never wrote one."""
    try:
        return int((folder / PID_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def interrupt_then_stop(
    proc: subprocess.Popen[Any],
    child: int | None,
    stop: Callable[[subprocess.Popen[Any]], None],
    grace: float = INTERRUPT_GRACE_SECONDS,
) -> bool:
    """The deadline passed: ``SIGINT`` to the child's Python (``child``; its pytest ends and ncu writes what it
    captured), ``grace`` seconds for the guarded command to end, then ``stop`` it. True when it ended by itself.
    A child that never named itself (still starting) gets no grace: nothing it could write is lost."""
    ended = False
    if child is not None:
        try:
            os.kill(child, signal.SIGINT)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(grace)
            ended = True
        except subprocess.TimeoutExpired:
            pass
    stop(proc)
    return ended
