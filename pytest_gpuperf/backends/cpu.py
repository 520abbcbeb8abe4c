"""The CPU backend: always available; peak memory from torch's CPU allocator events."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.backends.base import Availability
from pytest_gpuperf.backends.torch_common import TorchBackend, host_description, torch_versions

if TYPE_CHECKING:
    from pytest_gpuperf.timing.kernel_signature import KernelSignature
    from pytest_gpuperf.timing.record import Instrument
    from pytest_gpuperf.timing.samplers import Sampler
    from pytest_gpuperf.timing.sampling import MeasureConfig


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The brand this process read, for the processes it starts (A/B workers, replicas, ranks, a user's subprocesses):
#: they run on the same CPU and take it from here instead of running py-cpuinfo's CPUID subprocess again (~0.2 s).
BRAND_ENV = "GPUPERF_CPU_BRAND"


@functools.lru_cache(maxsize=1)
def cpu_brand() -> str:
    """The CPU's brand string for the fingerprint: ``cpuinfo``'s ``brand_raw`` (what pytest-benchmark
    records, e.g. ``AMD EPYC 9654 96-Core Processor``), else ``/proc/cpuinfo``'s model name.

    ``cpuinfo`` is the module of the CPU-info package pytest-benchmark requires (py-cpuinfo, or py-cpuinfo2 from
    pytest-benchmark 5.3): this project requires none of its own, so the two never install into one folder.
    A process started by one that read it inherits it through :data:`BRAND_ENV`.
    """
    inherited = os.environ.get(BRAND_ENV, "").strip()
    if inherited:
        return inherited
    try:
        import cpuinfo  # pytest-benchmark's CPU-info dependency

        brand = str(cpuinfo.get_cpu_info().get("brand_raw") or "").strip()
    except Exception:  # noqa: BLE001 - a missing or failing py-cpuinfo falls back to /proc/cpuinfo
        brand = ""
    brand = brand or _cpu_model_name()
    os.environ[BRAND_ENV] = brand
    return brand


def _total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class CpuBackend(TorchBackend):
    """Run perf tests on the host CPU through torch."""

    name = "cpu"
    torch_device_type = "cpu"

    def torch_availability(self, torch: Any) -> Availability:
        return Availability(True, f"CPU: {_cpu_model_name()}")

    def instruments(self, config: MeasureConfig) -> Sequence[Instrument]:
        """The measuring threads (``gpuperf_cpu_threads``) over the whole measurement."""
        from pytest_gpuperf.timing.threads import CpuThreads

        return (CpuThreads(config.cpu_threads),)

    def clock_sampler(self, config: MeasureConfig) -> Sampler:
        """The thread's CPU time with one intra-op thread (``cpu_clock`` auto) or when asked (``thread``), else the
        wall clock (:meth:`time_block`); the heap shifted between samples (``shift_layout``).

        On a CPU shared with other jobs, wall time counts the slices the scheduler gave to them; with one intra-op
        thread every op of the step runs in the calling thread, so its CPU time is the step's own cost.
        """
        import time

        import torch

        from pytest_gpuperf.timing.layout import HeapLayout
        from pytest_gpuperf.timing.samplers import BlockSampler, ThreadClockSampler

        layout = HeapLayout() if config.shift_layout else None
        if config.cpu_clock == "thread" or (config.cpu_clock == "auto" and torch.get_num_threads() == 1):
            return ThreadClockSampler(self.time_block, layout=layout)
        return BlockSampler(self.time_block, "events", cpu_now=time.thread_time, layout=layout)

    def fingerprint(self) -> dict[str, Any]:
        from pytest_gpuperf.backends.cpu_threads import effective

        return {
            "backend": "cpu",
            "device_name": cpu_brand(),
            "arch": platform.machine(),
            "memory_gib": round(_total_memory_bytes() / 2**30),
            "threads": effective(),  # intra-op threads while measuring (gpuperf_cpu_threads)
            **torch_versions(),
            **host_description(),
        }

    def is_host_cpu(self) -> bool:
        return True

    def synchronize(self) -> None:
        """CPU ops in eager torch are synchronous; nothing to wait for."""

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Wall seconds of ``iters`` calls, with the session's measuring threads (``gpuperf_cpu_threads``)."""
        from pytest_gpuperf.backends.cpu_threads import session_threads

        with session_threads():
            return super().time_block(step, iters)

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        """Peak bytes of one call through torch's CPU allocator, with the session's measuring threads."""
        from pytest_gpuperf.backends.cpu_memory import measure_cpu_peak_bytes
        from pytest_gpuperf.backends.cpu_threads import session_threads

        with session_threads():
            return measure_cpu_peak_bytes(step)

    def kernel_signature(self, step: Callable[[], object]) -> KernelSignature | None:
        """The aten ops of one call (:func:`~pytest_gpuperf.backends.kernel_probe.cpu_signature`)."""
        from pytest_gpuperf.backends.cpu_threads import session_threads
        from pytest_gpuperf.backends.kernel_probe import cpu_signature

        with session_threads():
            return cpu_signature(step)

    def peak_memory_and_signature(
        self, step: Callable[[], object], memory: bool
    ) -> tuple[int | None, KernelSignature | None]:
        """One profiled call gives both the peak and the aten ops (the signature costs no call of its own)."""
        if not memory:
            return None, self.kernel_signature(step)
        from pytest_gpuperf.backends.cpu_threads import session_threads
        from pytest_gpuperf.backends.kernel_probe import cpu_peak_and_signature

        with session_threads():
            return cpu_peak_and_signature(step)

    def memory_note(self) -> str:
        return "CPU peak = live bytes the step added through torch's CPU allocator (profiler memory events)"
