"""The host-sync check of a CUDA step: one call under torch's sync debug mode, counted, and shared.

A ``.item()``, a ``nonzero()`` or a device-to-host copy makes the host wait for the GPU once per step: a
deterministic count (the ``host_syncs`` metric), where the time it costs can hide inside the host overhead's
noise. The same count decides whether the step can be captured into a CUDA graph (a step that synchronizes
cannot). So the check runs once: the measuring pipeline's probe stage counts (``Backend.count_host_syncs``) and
holds the count while the step is timed (:func:`known_host_syncs`), and the graph capture
(:func:`pytest_gpuperf.timing.cuda.graph.capture`) reads it (:func:`host_syncs_known`) instead of calling the step
under the debug mode again; a capture without a held count (``measure_time`` called directly) checks itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: torch's notice, given once per process when the debug mode is first set: not a synchronization of the step.
PROTOTYPE_NOTICE = "Synchronization debug mode is a prototype feature"
#: What torch's debug mode says of a synchronizing operation (warned in "warn" mode, raised in "error" mode).
HOST_SYNC_MESSAGE = "called a synchronizing CUDA operation"

_KNOWN: ContextVar[tuple[Callable[[], object], int] | None] = ContextVar("gpuperf_known_host_syncs", default=None)


def is_host_sync(message: str) -> bool:
    """True for a warning of torch's sync debug mode about one synchronizing operation (not its notice)."""
    return "synchroniz" in message and PROTOTYPE_NOTICE not in message


def count_cuda_syncs(step: Callable[[], object]) -> int:
    """Call ``step`` once under ``torch.cuda.set_sync_debug_mode("warn")``; its synchronizing operations."""
    import warnings

    import torch

    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    return sum(1 for warning in caught if is_host_sync(str(warning.message)))


@contextmanager
def known_host_syncs(step: Callable[[], object], syncs: int | None) -> Iterator[None]:
    """While timing ``step``: it makes ``syncs`` host syncs per call, as counted (None: not counted)."""
    token = _KNOWN.set(None if syncs is None else (step, syncs))
    try:
        yield
    finally:
        _KNOWN.reset(token)


def host_syncs_known(step: Callable[[], object]) -> int | None:
    """The count :func:`known_host_syncs` holds for this very ``step``; None when none is held for it."""
    known = _KNOWN.get()
    return known[1] if known is not None and known[0] is step else None
