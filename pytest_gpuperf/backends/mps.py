"""The Apple Metal (MPS) backend.

Never run on real Metal hardware by this project (no machine here has it): it is
written against torch's documented ``torch.mps`` / ``torch.accelerator`` APIs and
unit-tested with those APIs replaced by fakes (``tests/test_mps_backend.py``).
``docs/backends.md`` says what was never run.

Timing: a pair of ``torch.mps.Event(enable_timing=True)`` around the steps; where
the installed torch has no ``torch.mps.Event``, ``torch.mps.synchronize()`` + the
host clock.

Memory: when the installed torch has ``torch.accelerator.max_memory_allocated`` /
``reset_peak_memory_stats`` and they work for MPS, the peak after a reset is used.
Otherwise the peak is sampled as ``torch.mps.current_allocated_memory()`` before and
after the step (while its result is alive), which misses transient buffers freed
inside the step; ``driver_allocated_memory()`` is kept next to it
(:attr:`MpsBackend.last_driver_bytes`): it includes Metal's cached heaps, so it
over-counts. :meth:`MpsBackend.memory_note` says which one was used.
"""

from __future__ import annotations

import platform
import re
import subprocess
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.backends.base import Availability
from pytest_gpuperf.backends.torch_common import (
    TorchBackend,
    first_missing,
    host_description,
    time_with_events,
    torch_versions,
)

NO_METAL = "no Metal device is available (macOS 12.3+ needed)"
MEMORY_API_ACCELERATOR = "torch.accelerator.max_memory_allocated"
MEMORY_API_SAMPLED = "torch.mps.current_allocated_memory (sampled)"


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _sysctl(name: str) -> str:
    return _run(["sysctl", "-n", name]).strip()


def parse_gpu_core_count(ioreg_output: str, profiler_output: str = "") -> int:
    """GPU cores from ``ioreg`` (``"gpu-core-count" = 10``) or ``system_profiler`` (``Total Number of Cores: 10``)."""
    match = re.search(r'"gpu-core-count"\s*=\s*(\d+)', ioreg_output)
    if match is None:
        match = re.search(r"Total Number of Cores:\s*(\d+)", profiler_output)
    return int(match.group(1)) if match else 0


def _gpu_core_count() -> int:
    """GPU core count of the Apple GPU, 0 where neither ``ioreg`` nor ``system_profiler`` says."""
    count = parse_gpu_core_count(_run(["ioreg", "-rc", "AGXAccelerator", "-d", "1"]))
    if count == 0:
        count = parse_gpu_core_count("", _run(["system_profiler", "SPDisplaysDataType"]))
    return count


def _accelerator_peak_api(torch: Any) -> Any | None:
    accel = getattr(torch, "accelerator", None)
    if accel is not None and hasattr(accel, "max_memory_allocated") and hasattr(accel, "reset_peak_memory_stats"):
        return accel
    return None


class MpsBackend(TorchBackend):
    """Run perf tests on Apple Silicon through PyTorch's Metal Performance Shaders backend."""

    name = "mps"
    torch_device_type = "mps"

    def __init__(self) -> None:
        #: Which memory API the last ``measure_peak_memory`` used (see module docstring).
        self.memory_api = ""
        #: ``torch.mps.driver_allocated_memory()`` after the last sampled step (over-counts: Metal heap cache).
        self.last_driver_bytes = 0
        self._accelerator_failed = False

    def torch_availability(self, torch: Any) -> Availability:
        return first_missing(
            [
                (torch.backends.mps.is_built, f"torch {torch.__version__} was built without MPS (Metal) support"),
                (torch.backends.mps.is_available, f"torch has MPS support but {NO_METAL}"),
            ],
            lambda: f"MPS: {self._chip()}",
        )

    def _chip(self) -> str:
        return _sysctl("machdep.cpu.brand_string") or platform.processor() or "Apple GPU"

    def fingerprint(self) -> dict[str, Any]:
        import torch

        return {
            "backend": "mps",
            "device_name": self._chip(),
            "arch": platform.machine(),
            "memory_gib": round(int(_sysctl("hw.memsize") or 0) / 2**30),
            "gpu_cores": _gpu_core_count(),
            "macos": platform.mac_ver()[0],
            "timer": "torch.mps.Event" if hasattr(torch.mps, "Event") else "torch.mps.synchronize+host clock",
            "memory_api": MEMORY_API_ACCELERATOR if self._use_accelerator(torch) else MEMORY_API_SAMPLED,
            **torch_versions(),
            **host_description(),
        }

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Time with a ``torch.mps.Event(enable_timing=True)`` pair; synchronize + host clock without it."""
        import torch

        if not hasattr(torch.mps, "Event"):
            return super().time_block(step, iters)
        return time_with_events(torch.mps.Event, step, iters)

    def _use_accelerator(self, torch: Any) -> bool:
        return not self._accelerator_failed and _accelerator_peak_api(torch) is not None

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        """Peak bytes of one step: ``torch.accelerator`` peak stats when they work, else sampled current bytes."""
        import torch

        torch.mps.synchronize()
        if self._use_accelerator(torch):
            accel = _accelerator_peak_api(torch)
            try:
                accel.reset_peak_memory_stats()
                step()
                torch.mps.synchronize()
                self.memory_api = MEMORY_API_ACCELERATOR
                return int(accel.max_memory_allocated())
            except (RuntimeError, NotImplementedError, TypeError):
                self._accelerator_failed = True  # this torch's MPS allocator has no device stats
        before = int(torch.mps.current_allocated_memory())
        result = step()
        torch.mps.synchronize()
        after = int(torch.mps.current_allocated_memory())
        self.last_driver_bytes = int(torch.mps.driver_allocated_memory())
        del result
        self.memory_api = MEMORY_API_SAMPLED
        return max(before, after)

    def memory_note(self) -> str:
        if self.memory_api == MEMORY_API_ACCELERATOR:
            return "MPS peak = torch.accelerator.max_memory_allocated() after reset_peak_memory_stats()"
        return (
            "MPS peak = torch.mps.current_allocated_memory() sampled before/after the step (transient buffers "
            f"freed inside the step are missed); driver_allocated_memory() = {self.last_driver_bytes} B "
            "(includes Metal's heap cache, over-counts)"
        )

    def reset_state(self) -> None:
        import torch

        torch.mps.empty_cache()
