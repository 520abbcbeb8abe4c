"""Shared pieces of the torch-tensor backends (cpu, cuda, mps)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_gpuperf.backends.base import Availability, Backend


def torch_versions() -> dict[str, Any]:
    """torch's own version, recorded in every torch backend's fingerprint."""
    import torch

    version = str(torch.__version__)
    return {"torch": version.split("+")[0], "torch_build": version}


class TorchBackend(Backend):
    """Base for backends whose device is a ``torch.device``; times with sync + host clock."""

    torch_device_type = "cpu"

    def availability(self) -> Availability:
        """Unavailable without torch; else what :meth:`torch_availability` finds."""
        try:
            import torch
        except ImportError as exc:
            return Availability(False, f"torch is not importable: {exc}")
        return self.torch_availability(torch)

    def torch_availability(self, torch: Any) -> Availability:
        """Whether this torch can run the backend's device (``torch`` is imported)."""
        return Availability(True, self.torch_device_type)

    def device(self) -> Any:
        import torch

        return torch.device(self.torch_device_type)

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Synchronize, run ``iters`` steps, synchronize again: the host clock then spans device work."""
        self.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            step()
        self.synchronize()
        return time.perf_counter() - start


def time_with_events(event_class: Any, step: Callable[[], object], iters: int) -> float:
    """Seconds for ``iters`` back-to-back steps between two device timing events (``torch.cuda.Event``,
    ``torch.mps.Event``) recorded on the current stream: device time, not host time."""
    start = event_class(enable_timing=True)
    end = event_class(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def first_missing(checks: Sequence[tuple[Callable[[], bool], str]], found: Callable[[], str]) -> Availability:
    """Unavailable with the reason of the first check that fails (each asked only after the ones before pass),
    else available as ``found()`` describes it."""
    for check, reason in checks:
        if not check():
            return Availability(False, reason)
    return Availability(True, found())


def host_description() -> dict[str, Any]:
    """OS and machine of the host, for the fingerprint's informational part."""
    return {"os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}
