"""The Vulkan backend, through ``wgpu`` (which reaches Metal on macOS with the same code).

Vulkan is not a torch device: ``gpuperf.device`` is a
:class:`~pytest_gpuperf.backends.vulkan.device.VulkanDevice` whose buffers and WGSL kernels the
test uses. Timing brackets the dispatches a step records with GPU timestamp queries;
on an adapter without ``timestamp-query`` it falls back to
``queue.on_submitted_work_done`` + the host clock, and the fingerprint and memory
note say so. Peak memory is the most bytes of buffers allocated through the wrapper
alive at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.backends.base import Availability, Backend

if TYPE_CHECKING:
    from pytest_gpuperf.backends.vulkan.adapters import AdapterInfo
    from pytest_gpuperf.backends.vulkan.device import VulkanDevice

COOPERATIVE_MATRIX = "VK_KHR_cooperative_matrix"
_INSTALL_HINT = (
    "install pytest-gpuperf[vulkan] (wgpu) and a Vulkan driver + loader (e.g. mesa-vulkan-drivers libvulkan1)"
)


class VulkanBackend(Backend):
    """Run WGSL compute kernels on a Vulkan (or Metal) adapter chosen by ``gpuperf_vulkan_device``."""

    name = "vulkan"
    runs_torch = False

    def __init__(self) -> None:
        self.device_spec = ""
        #: Set to True to time with synchronize + host clock even where timestamps exist (tests, debugging).
        self.force_host_timer = False
        self._device: VulkanDevice | None = None

    # -- which adapter ------------------------------------------------------------
    def select(self, spec: str) -> AdapterInfo:
        """Choose the adapter (INDEX, NAME substring or TYPE); raises ``AdapterSelectionError`` listing them."""
        from pytest_gpuperf.backends.vulkan.adapters import native_adapters, select_adapter

        info = select_adapter([i for i, _ in native_adapters()], spec)
        if spec != self.device_spec:
            self.close()
            self.device_spec = spec
        return info

    def adapter(self) -> tuple[AdapterInfo, Any]:
        """The selected adapter's info and ``wgpu.GPUAdapter``."""
        from pytest_gpuperf.backends.vulkan.adapters import native_adapters, select_adapter

        pairs = native_adapters()
        info = select_adapter([i for i, _ in pairs], self.device_spec)
        return info, pairs[info.index][1]

    def availability(self) -> Availability:
        try:
            import wgpu  # noqa: F401
        except ImportError as exc:
            return Availability(False, f"wgpu is not importable ({exc}); {_INSTALL_HINT}")
        from pytest_gpuperf.backends.vulkan.adapters import AdapterSelectionError, native_adapters, other_adapters

        try:
            pairs = native_adapters()
        except Exception as exc:  # noqa: BLE001 - a broken driver must become a skip reason, not a crash
            return Availability(False, f"wgpu could not enumerate adapters: {type(exc).__name__}: {exc}")
        if not pairs:
            seen = ", ".join(other_adapters()) or "none"
            reason = f"wgpu found no Vulkan or Metal adapter (other adapters: {seen}); {_INSTALL_HINT}"
            return Availability(False, reason)
        try:
            info, _ = self.adapter()
        except AdapterSelectionError as exc:
            return Availability(False, str(exc))
        return Availability(True, f"{info.backend}: {info.describe()}")

    # -- the device ---------------------------------------------------------------
    def device(self) -> VulkanDevice:
        """The :class:`VulkanDevice` of the selected adapter (opened once, with timestamp-query when offered)."""
        if self._device is None:
            from pytest_gpuperf.backends.vulkan.device import VulkanDevice

            info, adapter = self.adapter()
            timestamps = info.timestamp_query and not self.force_host_timer
            limits = {
                key: adapter.limits[key]
                for key in ("max-buffer-size", "max-storage-buffer-binding-size")
                if key in adapter.limits
            }
            features = ["timestamp-query"] if timestamps else []
            wgpu_device = adapter.request_device_sync(required_features=features, required_limits=limits)
            self._device = VulkanDevice(adapter, info, wgpu_device, timestamps)
        return self._device

    def close(self) -> None:
        """Forget the open device (a new selection opens a new one)."""
        if self._device is not None:
            self._device.release_all()
        self._device = None

    def timer_description(self) -> str:
        """How :meth:`time_block` times: GPU timestamps or the host-clock fallback."""
        if self.device().timestamps:
            return "gpu-timestamp-query"
        return "host-clock+on_submitted_work_done (no timestamp-query)"

    def wait_scope(self) -> str:
        """``"process"`` on a CPU adapter: its rasterizer threads do the step while the calling thread waits."""
        return "process" if self.is_host_cpu() else "thread"

    def is_host_cpu(self) -> bool:
        """A CPU adapter (lavapipe, SwiftShader) shares the host's cores: CPU time tolerance applies."""
        info, _ = self.adapter()
        return str(info.device_type).upper() == "CPU"

    def fingerprint(self) -> dict[str, Any]:
        import platform

        import wgpu

        from pytest_gpuperf.backends.torch_common import host_description
        from pytest_gpuperf.backends.vulkan.probe import find_physical_device

        info, _ = self.adapter()
        physical = find_physical_device(info.name, info.vendor_id, info.device_id)
        coop: bool | str = "unknown" if physical is None else COOPERATIVE_MATRIX in physical.extensions
        return {
            "backend": "vulkan",
            "device_name": info.name,
            "arch": f"{info.backend}-{info.device_type}".lower(),
            "memory_gib": round(physical.device_local_bytes / 2**30) if physical else 0,
            "api": info.backend,
            "api_version": physical.api_version if physical else "unknown",
            "vendor": info.vendor or f"0x{info.vendor_id:04x}",
            "vendor_id": info.vendor_id,
            "device_id": info.device_id,
            "device_type": info.device_type,
            "driver": info.driver,
            "timestamp_query": info.timestamp_query,
            "timer": self.timer_description(),
            "cooperative_matrix": coop,
            "wgpu": wgpu.__version__,
            "arch_host": platform.machine(),
            **host_description(),
        }

    # -- timing and memory ----------------------------------------------------------
    def synchronize(self) -> None:
        self.device().synchronize()

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """GPU time of the dispatches ``iters`` steps record (timestamp queries), or host time as fallback."""
        from pytest_gpuperf.backends.vulkan.device import NothingRecordedError, _nothing_recorded_message

        device = self.device()
        if not device.timestamps:
            return device.host_timed_seconds(step, iters)
        with device.timed() as timer:
            for _ in range(iters):
                step()
        if timer.dispatches == 0:
            raise NothingRecordedError(_nothing_recorded_message(device.info.name))
        return timer.seconds

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        """Most bytes of wrapper-allocated buffers alive at once while one step runs (inputs included)."""
        device = self.device()
        device.synchronize()
        device.reset_peak()
        result = step()
        device.synchronize()
        del result
        return device.peak_bytes

    def memory_note(self) -> str:
        note = (
            "Vulkan peak = bytes of buffers allocated through gpuperf.device (buffer/empty) alive at once, "
            "inputs included; driver-internal and pipeline memory are missed"
        )
        if self._device is not None and not self._device.timestamps:
            note += "; timing fell back to host clock + on_submitted_work_done (no timestamp-query)"
        return note

    def reset_state(self) -> None:
        """Destroy the buffers the finished test allocated."""
        if self._device is not None:
            self._device.release_all()

    # -- roofs ----------------------------------------------------------------------
    def measure_roof(self, what: str, dtype_class: str, tries: int = 5) -> dict[str, Any] | None:
        """One roof for :mod:`pytest_gpuperf.profiling.roofs`: ``compute`` (float32 FMA chains), ``dram`` (copy
        and saxpy kernels); ``cache`` is not measured on Vulkan (None: steps are judged against DRAM)."""
        from pytest_gpuperf.backends.vulkan.roofs import measure_bandwidth, measure_compute

        if what == "compute":
            return {"peak_flops": measure_compute(self.device(), tries), "kernel": "fma_chain float32"}
        if what == "dram":
            return {"bandwidth": measure_bandwidth(self.device(), tries), "kernel": "copy/saxpy vec4"}
        return None
