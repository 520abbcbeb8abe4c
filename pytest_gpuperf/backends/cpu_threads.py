"""The CPU backend's intra-op thread count while measuring (``gpuperf_cpu_threads``, default 1).

Like ``torch.utils.benchmark.Timer``, CPU steps are timed with one intra-op torch
thread by default: on a shared runner several threads swing with the
neighbours' load by far more than one thread does (``docs/PERFORMANCE.md``
has the figures). The count is recorded in the CPU
fingerprint (``threads``) and the user's own setting is restored after each
measurement. ``0`` leaves torch's thread count as the test set it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pytest_gpuperf.timing.threads import measuring_open, measuring_threads

__all__ = ["DEFAULT_CPU_THREADS", "configure", "configured", "effective", "measuring_threads", "session_threads"]

#: Intra-op threads while timing a CPU step, unless ``gpuperf_cpu_threads`` says otherwise.
DEFAULT_CPU_THREADS = 1

_configured: list[int] = [DEFAULT_CPU_THREADS]


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
def session_threads() -> Iterator[int]:
    """The session's measuring threads for a CPU backend call made outside :func:`measure_time` (the plan's
    quick timing, peak memory); inside an open :func:`measuring_threads` block, that block's count stays."""
    import torch

    if measuring_open():
        yield int(torch.get_num_threads())
        return
    with measuring_threads(configured()) as threads:
        yield threads
