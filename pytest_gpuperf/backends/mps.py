"""The Apple Metal (MPS) backend.

Never run on real Metal hardware by this project (no machine here has it): it is
written against torch's documented ``torch.mps`` / ``torch.accelerator`` APIs and
unit-tested with those APIs replaced by fakes. See README, "What was run where".

Memory: when the installed torch exposes ``torch.accelerator.max_memory_allocated``
for MPS, that peak (after ``reset_peak_memory_stats``) is used. Otherwise the peak
is sampled as ``torch.mps.current_allocated_memory()`` after the step, which
misses transient buffers freed inside the step; ``driver_allocated_memory()`` is
recorded next to it (it includes the Metal heap cache, so it over-counts).
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.backends.base import Availability
from pytest_gpuperf.backends.torch_common import TorchBackend, host_description, torch_versions


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _gpu_core_count() -> int:
    """GPU core count from ``ioreg`` (``gpu-core-count``), 0 where it cannot be read."""
    try:
        out = subprocess.run(
            ["ioreg", "-rc", "AGXAccelerator", "-d", "1"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    for line in out.splitlines():
        if '"gpu-core-count"' in line:
            try:
                return int(line.rsplit("=", 1)[1].strip())
            except ValueError:
                return 0
    return 0


def _accelerator_peak_api(torch: Any) -> Any | None:
    accel = getattr(torch, "accelerator", None)
    if accel is not None and hasattr(accel, "max_memory_allocated") and hasattr(accel, "reset_peak_memory_stats"):
        return accel
    return None


class MpsBackend(TorchBackend):
    """Run perf tests on Apple Silicon through PyTorch's Metal Performance Shaders backend."""

    name = "mps"
    torch_device_type = "mps"

    def availability(self) -> Availability:
        try:
            import torch
        except ImportError as exc:
            return Availability(False, f"torch is not importable: {exc}")
        if not torch.backends.mps.is_built():
            return Availability(False, f"torch {torch.__version__} was built without MPS (Metal) support")
        if not torch.backends.mps.is_available():
            return Availability(False, "torch has MPS support but no Metal device is available (macOS 12.3+ needed)")
        return Availability(True, f"MPS: {self._chip()}")

    def _chip(self) -> str:
        return _sysctl("machdep.cpu.brand_string") or platform.processor() or "Apple GPU"

    def fingerprint(self) -> dict[str, Any]:
        return {
            "backend": "mps",
            "device_name": self._chip(),
            "arch": platform.machine(),
            "memory_gib": round(int(_sysctl("hw.memsize") or 0) / 2**30),
            "gpu_cores": _gpu_core_count(),
            "macos": platform.mac_ver()[0],
            **torch_versions(),
            **host_description(),
        }

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Time with ``torch.mps.Event(enable_timing=True)`` pairs around the steps."""
        import torch

        start = torch.mps.Event(enable_timing=True)
        end = torch.mps.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        import torch

        accel = _accelerator_peak_api(torch)
        torch.mps.synchronize()
        if accel is not None:
            accel.reset_peak_memory_stats()
            step()
            torch.mps.synchronize()
            return int(accel.max_memory_allocated())
        before = int(torch.mps.current_allocated_memory())
        result = step()
        torch.mps.synchronize()
        after = int(torch.mps.current_allocated_memory())
        del result
        return max(before, after)

    def memory_note(self) -> str:
        import torch

        if _accelerator_peak_api(torch) is not None:
            return "MPS peak = torch.accelerator.max_memory_allocated() after a reset"
        return (
            "MPS peak = torch.mps.current_allocated_memory() sampled around the step "
            "(transient buffers freed inside the step are missed)"
        )

    def reset_state(self) -> None:
        import torch

        torch.mps.empty_cache()
