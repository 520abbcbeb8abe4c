"""A host timer that first waits for queued device work: pytest-benchmark's timer under ``--gpuperf``.

pytest-benchmark reads the clock before and after each round; for asynchronous
devices the host clock alone would stop before the kernels finish. Calling
``synchronize`` on every initialised device before reading the clock makes its
rounds cover device work too.
"""

from __future__ import annotations

import sys
import time


def synchronized_perf_counter() -> float:
    """``time.perf_counter()`` after synchronizing CUDA/MPS if torch already initialised them."""
    torch = sys.modules.get("torch")
    if torch is not None:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        mps = getattr(torch, "mps", None)
        if mps is not None and torch.backends.mps.is_available():
            mps.synchronize()
    return time.perf_counter()
