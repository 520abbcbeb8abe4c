"""Intra-op torch threads while a step is timed, and the instrument that holds them for one measurement.

:func:`measuring_threads` sets torch's intra-op thread count for its body and restores it after; while one is open,
an inner call made by the backend (:func:`pytest_gpuperf.backends.cpu_threads.session_threads`) keeps the outer
count. :class:`CpuThreads` is the CPU backend's instrument: it holds the count over a whole measurement (warm-up
and samples) and reports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

#: The instrument's name among a timing record's facts (``TimingResult.cpu_threads`` reads it).
CPU_THREADS = "cpu_threads"

#: How many :func:`measuring_threads` blocks are open (an inner one never overrides an outer one's count).
_open: list[int] = [0]


def measuring_open() -> bool:
    """True inside a :func:`measuring_threads` block."""
    return _open[0] > 0


@contextmanager
def measuring_threads(threads: int) -> Iterator[int]:
    """Run the body with ``threads`` intra-op torch threads (0: unchanged); restore the previous count after."""
    import torch

    previous = int(torch.get_num_threads())
    _open[0] += 1
    try:
        if threads <= 0 or threads == previous:
            yield previous
            return
        torch.set_num_threads(threads)
        try:
            yield threads
        finally:
            torch.set_num_threads(previous)
    finally:
        _open[0] -= 1


class CpuThreads:
    """Instrument: ``threads`` intra-op threads (0: the test's own) over one measurement; reports the count."""

    name = CPU_THREADS

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.running: int | None = None
        self._stack = ExitStack()

    def __enter__(self) -> CpuThreads:
        self.running = self._stack.enter_context(measuring_threads(self.threads))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def facts(self) -> dict[str, Any]:
        """The thread count the step ran with."""
        return {} if self.running is None else {CPU_THREADS: self.running}
