"""The kernel-signature probe: one profiled call of a step, read as its kernels (CUDA) or aten ops (CPU).

It uses ``torch.autograd.profiler.profile``, the recorder ``torch.profiler.profile`` wraps, for the reason the CPU
peak-memory probe gives (:mod:`.cpu_memory`: the wrapper's start imports dynamo and inductor). On the CPU the
peak-memory probe's own profiled call serves both, so the signature costs no call of its own there. A profiler
that fails or sees nothing gives no signature, never an error: the signature only explains a verdict.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.timing.kernel_signature import Event, KernelSignature

#: Set in the child process Nsight Compute runs (:data:`pytest_gpuperf.profiling.ncu_child.ENV_MANIFEST`): there
#: CUPTI belongs to ncu, and the child reports no verdicts, so no signature is taken.
NCU_CHILD_ENV = "GPUPERF_NCU_MANIFEST"
log = logging.getLogger(__name__)


def _quiet_profiler() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    logging.getLogger("torch.profiler").setLevel(logging.ERROR)


def kineto_events(prof: Any) -> list[Event]:
    """The events of a finished profiler as :data:`~pytest_gpuperf.timing.kernel_signature.Event` tuples, without
    its memory events; the launch metadata is read for device events only, and a field this torch lacks reads as
    ``""`` or 0 (the getters are looked up once: a training step has thousands of events)."""
    raw = prof.kineto_results.events()
    if not raw:
        return []
    kind = type(raw[0])
    activity = getattr(kind, "activity_type", None)
    thread = getattr(kind, "start_thread_id", None)
    metadata = getattr(kind, "metadata_json", None)
    events = []
    for event in raw:
        name, device = event.name(), event.device_type().name
        if name == "[memory]":
            continue
        events.append(
            (
                name,
                device,
                str(activity(event)) if activity else "",
                event.start_ns(),
                event.duration_ns(),
                thread(event) if thread else 0,
                str(metadata(event) or "") if metadata and device != "CPU" else "",
            )
        )
    return events


def signature_from(prof: Any, device: bool) -> KernelSignature | None:
    """The signature of a finished profiler's call; None (logged) when its events cannot be read."""
    from pytest_gpuperf.timing.kernel_signature import signature_of

    try:
        return signature_of(kineto_events(prof), device)
    except Exception as exc:  # noqa: BLE001 - a signature explains; it never turns a measurement into an error
        log.debug("no kernel signature: %s: %s", type(exc).__name__, exc)
        return None


def cuda_signature(step: Callable[[], object]) -> KernelSignature | None:
    """One call of ``step`` under CUPTI (through torch's profiler), synchronized inside: its kernel signature."""
    if os.environ.get(NCU_CHILD_ENV):
        return None
    import torch
    from torch.autograd.profiler import profile

    from pytest_gpuperf.backends.cpu_memory import without_probe_noise

    _quiet_profiler()
    torch.cuda.synchronize()
    try:
        with without_probe_noise(), profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
            step()
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - CUPTI busy (nsys, another profiler) or missing: no signature
        log.debug("no kernel signature: %s: %s", type(exc).__name__, exc)
        return None
    return signature_from(prof, device=True)


def cpu_peak_and_signature(step: Callable[[], object]) -> tuple[int, KernelSignature | None]:
    """The CPU peak-memory probe's one call (:func:`~.cpu_memory.profiled_peak`): its peak and its aten ops."""
    from pytest_gpuperf.backends.cpu_memory import profiled_peak

    peak, prof = profiled_peak(step)
    return peak, signature_from(prof, device=False)


def cpu_signature(step: Callable[[], object]) -> KernelSignature | None:
    """One call of ``step`` under the CPU profiler: its aten ops (used when the peak-memory probe is off)."""
    from torch.autograd.profiler import profile

    from pytest_gpuperf.backends.cpu_memory import without_probe_noise

    _quiet_profiler()
    with without_probe_noise(), profile(use_cpu=True, use_kineto=True) as prof:
        step()
    return signature_from(prof, device=False)
