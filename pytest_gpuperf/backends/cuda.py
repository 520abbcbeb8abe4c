"""The CUDA backend: device time per step (graph replay, CUPTI, CUDA events) and the caching allocator's peak."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.backends.base import Availability
from pytest_gpuperf.backends.torch_common import (
    TorchBackend,
    first_missing,
    host_description,
    time_with_events,
    torch_versions,
)

if TYPE_CHECKING:
    from pytest_gpuperf.timing.kernel_signature import KernelSignature
    from pytest_gpuperf.timing.samplers import Sampler
    from pytest_gpuperf.timing.sampling import MeasureConfig


def _driver_version() -> str:
    """The NVIDIA kernel driver's version (``580.159.04``), from /proc or nvidia-smi; "" where neither answers."""
    import re
    import subprocess

    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", handle.read())
            if found:
                return found.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        return out.splitlines()[0] if out else ""
    except (OSError, subprocess.SubprocessError):
        return ""


class CudaBackend(TorchBackend):
    """Run perf tests on the current CUDA device (``cuda:0`` of ``CUDA_VISIBLE_DEVICES``)."""

    name = "cuda"
    torch_device_type = "cuda"

    def torch_availability(self, torch: Any) -> Availability:
        version = torch.__version__
        return first_missing(
            [
                (torch.backends.cuda.is_built, f"torch {version} was built without CUDA"),
                (torch.cuda.is_available, f"torch {version} has CUDA support but found no CUDA device"),
            ],
            lambda: f"CUDA: {torch.cuda.get_device_name(0)}",
        )

    def clock_sampler(self, config: MeasureConfig) -> Sampler:
        """The GPU's own time per step: CUDA graph replay, else CUPTI kernel sums, else events
        (:class:`~pytest_gpuperf.timing.cuda.device_time.DeviceTimeSampler`)."""
        from pytest_gpuperf.timing.cuda.device_time import DeviceTimeSampler

        return DeviceTimeSampler(self.time_block)

    def device(self) -> Any:
        import torch

        return torch.device("cuda", torch.cuda.current_device())

    def fingerprint(self) -> dict[str, Any]:
        import torch

        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        driver = _driver_version()
        return {
            "backend": "cuda",
            "device_name": props.name,
            "arch": f"sm_{props.major}{props.minor}",
            "memory_gib": round(props.total_memory / 2**30),
            "multiprocessors": props.multi_processor_count,
            "driver": driver,
            "runtime": torch.version.cuda or "",
            **torch_versions(),
            **host_description(),
        }

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Time ``iters`` back-to-back steps with a pair of CUDA events on the current stream."""
        import torch

        return time_with_events(torch.cuda.Event, step, iters)

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        """Reset the allocator's peak, run the step once, return ``max_memory_allocated``."""
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())

    def count_host_syncs(self, step: Callable[[], object]) -> int | None:
        """Call ``step`` once under torch's sync debug mode and count its synchronizing operations.

        A ``.item()``, a ``nonzero()`` or a device-to-host copy makes the host wait for the GPU once per step:
        a deterministic count, where the time it costs can hide inside the host overhead's noise. The same
        count decides the step's CUDA graph capture (:mod:`pytest_gpuperf.timing.cuda.host_syncs`).
        """
        from pytest_gpuperf.timing.cuda.host_syncs import count_cuda_syncs

        return count_cuda_syncs(step)

    def kernel_signature(self, step: Callable[[], object]) -> KernelSignature | None:
        """The kernels of one call under CUPTI (:func:`~pytest_gpuperf.backends.kernel_probe.cuda_signature`)."""
        from pytest_gpuperf.backends.kernel_probe import cuda_signature

        return cuda_signature(step)

    def memory_note(self) -> str:
        return "CUDA peak = torch.cuda.max_memory_allocated() after a reset (tensors live during the step)"

    def reset_state(self) -> None:
        import torch

        torch.cuda.empty_cache()
