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


def _call(event: Any, method: str, default: Any) -> Any:
    getter = getattr(event, method, None)
    return getter() if callable(getter) else default


def kineto_events(prof: Any) -> list[Event]:
    """The events of a finished profiler as :data:`~pytest_gpuperf.timing.kernel_signature.Event` tuples (the
    launch metadata read for device events only; torch versions without a field give ``""`` or 0)."""
    events = []
    for event in prof.kineto_results.events():
        device = event.device_type().name
        events.append(
            (
                event.name(),
                device,
                str(_call(event, "activity_type", "") or ""),
                int(event.start_ns()),
                int(event.duration_ns()),
                int(_call(event, "start_thread_id", 0) or 0),
                str(_call(event, "metadata_json", "") or "") if device != "CPU" else "",
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
