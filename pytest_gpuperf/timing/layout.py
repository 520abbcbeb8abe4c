"""Shift the heap between the samples of a host-CPU step, so that no process is stuck in one buffer layout.

glibc places a step's temporaries where the heap's history puts them, and they stay there for the life of the
process: the same freed chunks come back call after call. Measured on this project's 2-core AMD EPYC VM
(``docs/PERFORMANCE.md``, "a 7x process effect"): ``(x * 2.0 + 1.0).relu() * x`` over 2^18 fp32 on one thread ran
890-1205 us per call in the processes where the allocator put an output 64 bytes after its input modulo 4 KiB
(the vectorised loop's loads alias its stores in the low 12 address bits: 4K aliasing) and 116-119 us in the
others, about half each. A whole process landed in one mode, so a baseline's processes spread 84-634% and its
time verdicts could never decide.

:func:`shifted` allocates a spacer of random size (a multiple of 64 B below 2 MiB) before each sample and
frees it after, so the step's temporaries land at other offsets from one sample to the next: in 8 fresh
processes every one then had at most 4 of 20 batches of calls in the slow layout (per-process 10th percentile
of the batch medians 115-137 us), where 2 of 6 unshifted processes had only slow ones. The judged statistic, the
20% quantile of the samples, then reads the same layout mix in every process. In the plugin, 5-process
recordings of that step and of a layernorm + softmax spread 6-583% (one process of 15 still slow) and 8-29%,
against 652-698% and 422-488% unshifted. The spacer is made outside the timed calls.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

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
    threshold when such a block is freed, up to 32 MiB; whether a step's 8 MiB temporaries come from reused heap or
    from fresh, zeroed pages (2048 page faults each) depends on what the process freed before. The perf suite's
    layernorm + softmax over 2048 x 1024 fp32 read 655 krows/s in some processes and 188 in others, and a
    recording's processes spread 487%. Fixing both thresholds gives every measuring process the heap reuse a
    training loop settles into. A no-op where the C library has no ``mallopt`` (macOS, musl).
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
