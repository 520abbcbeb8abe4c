"""The CPU backend's intra-op thread count while measuring (``gpuperf_cpu_threads``, default 1).

Like ``torch.utils.benchmark.Timer``, CPU steps are timed with one intra-op torch
thread by default: on a shared runner several threads swing with the
neighbours' load (one baseline's samples spread 63x with the default threads;
18 of 19 runs were clean with one). The count is recorded in the CPU
fingerprint (``threads``) and the user's own setting is restored after each
measurement. ``0`` leaves torch's thread count as the test set it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: Intra-op threads while timing a CPU step, unless ``gpuperf_cpu_threads`` says otherwise.
DEFAULT_CPU_THREADS = 1

_configured: list[int] = [DEFAULT_CPU_THREADS]
#: How many :func:`measuring_threads` blocks are open (an inner one never overrides an outer one's count).
_open: list[int] = [0]


def configure(threads: int) -> None:
    """Set the session's measuring thread count (``0``: the test's own); ``ValueError`` below 0."""
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise ValueError(f"expected a whole number of threads >= 0 (0: keep torch's own), got {threads!r}")
    _configured[0] = threads


def configured() -> int:
    """The session's measuring thread count (``0``: the test's own)."""
    return _configured[0]


def effective(threads: int | None = None) -> int:
    """The thread count a CPU measurement runs with: ``threads`` (or the session's), torch's own for 0."""
    wanted = configured() if threads is None else threads
    if wanted > 0:
        return wanted
    import torch

    return int(torch.get_num_threads())


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


@contextmanager
def session_threads() -> Iterator[int]:
    """The session's measuring threads for a CPU backend call made outside :func:`measure_time` (the plan's
    quick timing, peak memory); inside an open :func:`measuring_threads` block, that block's count stays."""
    import torch

    if _open[0]:
        yield int(torch.get_num_threads())
        return
    with measuring_threads(configured()) as threads:
        yield threads
