"""The probes: the step's calls outside the timed samples, each made exactly once, before the step is timed.

1. **the warm call**: one call first, so one-time work (lazy allocations, a first call's synchronizations) does
   not stand in for the steady state the other probes read;
2. **peak memory** (``memory=True``) **and the kernel signature**: the backend's ``peak_memory_and_signature``: on
   the CPU one profiled call gives both (the signature is its aten ops); on CUDA the peak is one call and the
   signature one more, under CUPTI (:mod:`pytest_gpuperf.timing.kernel_signature`); backends that cannot tell
   (MPS, Vulkan) make no signature call;
3. **the sync check**: the backend's ``count_host_syncs`` (one call on CUDA under torch's sync debug mode; no call
   where the backend cannot count). Its count is the ``host_syncs`` metric and, held while the step is timed
   (:func:`pytest_gpuperf.timing.cuda.host_syncs.known_host_syncs`), decides the CUDA graph capture, which then
   does not call the step under the debug mode again.

The FLOP/byte count is the count stage's: one call, made by the feature that classifies the step
(:func:`pytest_gpuperf.profiling.counting.count_step`) when it is registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.timing.kernel_signature import KernelSignature


@dataclass(frozen=True)
class Probes:
    """What the probes found about one step (read by the time and metrics stages)."""

    #: Peak device memory of one call in bytes (None: ``memory=False``) and what the number includes.
    peak_memory: int | None
    memory_note: str
    #: Host-device synchronizations per call (None where the backend cannot count them).
    host_syncs: int | None
    #: The kernels one call launched (None where the backend cannot tell, or its profiler failed).
    kernels: KernelSignature | None = None

    @contextmanager
    def held_for(self, step: Callable[[], object]) -> Iterator[None]:
        """Hold the sync check's count while ``step`` is timed (the graph capture reads it)."""
        from pytest_gpuperf.timing.cuda.host_syncs import known_host_syncs

        with known_host_syncs(step, self.host_syncs):
            yield


def probe(backend: Backend, step: Callable[[], object], memory: bool) -> Probes:
    """Make the step's extra calls (module doc): the warm call, peak memory when ``memory`` with the kernel
    signature, the sync check."""
    step()
    peak, kernels = backend.peak_memory_and_signature(step, memory)
    note = backend.memory_note() if memory else ""
    return Probes(peak, note, backend.count_host_syncs(step), kernels)
