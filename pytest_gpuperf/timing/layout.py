"""Shift the heap between the samples of a host-CPU step, so that no process is stuck in one buffer layout.

glibc places a step's temporaries where the heap's history puts them, and they stay there for the life of the
process: the same freed chunks come back call after call. When that layout puts an output a few bytes after its
input modulo 4 KiB, a vectorised loop's loads alias its stores in the low 12 address bits (4K aliasing) and the
whole process runs several times slower, so a baseline's processes would spread past any tolerance
(``docs/PERFORMANCE.md`` has the figures).

:func:`shifted` allocates a spacer of random size (a multiple of 64 B below 2 MiB) before each sample and
frees it after, so the step's temporaries land at other offsets from one sample to the next, and the judged
statistic (a low quantile of the samples) reads the same layout mix in every process. The spacer is made outside
the timed calls. :class:`HeapLayout` is the instrument the CPU sampler enters around its samples.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from pytest_gpuperf.timing.record import LAYOUT

#: Spacer sizes: a whole number of 64-byte lines, uniform below 2 MiB.
LINE, MAX_SPACER = 64, 2 << 20


def spacer_bytes(rng: random.Random) -> int:
    """The size of one spacer: splits a freed chunk at a random line, so the next ones start elsewhere."""
    return rng.randrange(1, MAX_SPACER // LINE) * LINE


def shifted(take: Callable[[], float], seed: int | None = None) -> Callable[[], float]:
    """``take`` with a spacer of :func:`spacer_bytes` held around each call (torch's CPU allocator, untimed)."""
    import torch

    rng = random.Random(seed)

    def take_shifted() -> float:
        spacer = torch.empty(spacer_bytes(rng), dtype=torch.uint8)  # noqa: F841 - held (freed on return)
        return take()

    return take_shifted


#: glibc's mallopt parameters: allocations below the threshold come from the heap, and freed memory at the top of
#: the heap is returned to the system only past the trim threshold.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: The largest mmap threshold glibc raises by itself (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit), and a trim
#: threshold above what a step frees between two calls.
HEAP_MMAP_THRESHOLD, HEAP_TRIM_THRESHOLD = 32 << 20, 512 << 20


@functools.cache
def steady_heap() -> bool:
    """Put glibc's malloc in the state a long-running process reaches by itself; True when it could (once).

    glibc serves an allocation above its mmap threshold (128 KiB at start) with fresh pages and raises the
    threshold when such a block is freed, up to 32 MiB; whether a step's large temporaries come from reused heap or
    from fresh, zeroed pages then depends on what the process freed before, and processes differ by several times.
    Fixing both thresholds gives every measuring process the heap reuse a training loop settles into. A no-op where
    the C library has no ``mallopt`` (macOS, musl).
    """
    import ctypes
    import ctypes.util

    try:
        mallopt = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallopt", None)
    except OSError:
        return False
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))


class HeapLayout:
    """Instrument of a CPU sampler: fixes glibc's heap thresholds on entry (:func:`steady_heap`), shifts the heap
    around each sample (:meth:`shifted`), and reports both."""

    name = LAYOUT

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self.heap_steady = False

    def __enter__(self) -> HeapLayout:
        self.heap_steady = steady_heap()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def shifted(self, take: Callable[[], float]) -> Callable[[], float]:
        """``take`` with a spacer held around each call (:func:`shifted`)."""
        return shifted(take, self.seed)

    def facts(self) -> dict[str, object]:
        """The heap was shifted between samples; whether its thresholds were fixed."""
        return {"layout_shifted": True, "heap_steady": self.heap_steady}
