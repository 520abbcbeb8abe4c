"""Measured roofs of a Vulkan device and the memory/compute verdict of a kernel against them.

The roofs are *measured*, not looked up: the bandwidth roof is the best rate of the
vec4 copy and saxpy kernels over buffers of 32 MiB (CPU device) or 256 MiB (GPU), the
compute roof the best rate of eight independent float32 FMA chains per thread
(:mod:`pytest_gpuperf.vulkan.kernels`). A kernel whose arithmetic intensity
(FLOP per byte moved) is above the ridge point ``compute / bandwidth`` is
compute-bound, below it memory-bound. :class:`VulkanRooflineExtension` adds
``<name>.bound`` (a category: a change fails the test) and ``<name>.roof_fraction``
(attained share of the attainable roof, informational) to every ``gpuperf.measure``
call on the vulkan backend that gives both ``flops`` and ``bytes_moved``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_gpuperf.results import KIND_CATEGORY, KIND_CUSTOM, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.vulkan.device import VulkanDevice

ROOF_REPEATS = 5


@dataclass(frozen=True)
class Roofs:
    """Best observed bandwidth (B/s) and float32 FMA rate (FLOP/s) of one device."""

    bandwidth: float
    compute: float

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/B) where the two roofs meet."""
        return self.compute / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """The roofline: the most FLOP/s a kernel of ``intensity`` FLOP/B can reach."""
        return min(self.compute, intensity * self.bandwidth)


def _best_rate(device: VulkanDevice, launch: Callable[[], None], work: float, launches: int) -> float:
    """Most ``work`` units per second over :data:`ROOF_REPEATS` timed blocks of ``launches`` dispatches."""
    launch()
    device.synchronize()
    best = 0.0
    for _ in range(ROOF_REPEATS):
        if device.timestamps:
            with device.timed() as timer:
                for _ in range(launches):
                    launch()
            seconds = timer.seconds
        else:
            seconds = device.host_timed_seconds(launch, launches)
        if seconds > 0:
            best = max(best, work * launches / seconds)
    return best


def measure_roofs(device: VulkanDevice) -> Roofs:
    """Measure the bandwidth and compute roofs of ``device`` with the copy and FMA-chain kernels."""
    import numpy as np

    from pytest_gpuperf.vulkan import kernels

    floats = device.max_floats(device.pick(cpu=1 << 23, default=1 << 26))  # 32 MiB (CPU device), 256 MiB (GPU)
    rng = np.random.default_rng(7)
    src = device.buffer(rng.standard_normal(floats, dtype=np.float32), tracked=False)
    dst = device.empty(floats, tracked=False)
    other = device.buffer(rng.standard_normal(floats, dtype=np.float32), tracked=False)
    launches = device.pick(cpu=3, default=10)
    copy = kernels.copy(device, src, dst)
    saxpy = kernels.saxpy(device, 0.5, src, other, dst)
    bandwidth = max(
        _best_rate(device, copy, 2.0 * src.nbytes, launches),
        _best_rate(device, saxpy, 3.0 * src.nbytes, launches),
    )

    threads = device.pick(cpu=1 << 14, default=1 << 20)
    trips = device.pick(cpu=256, default=1024)
    out = device.empty(threads, tracked=False)
    fma = kernels.fma_chain(device, out, trips)
    compute = _best_rate(device, fma, float(threads * trips * kernels.FMA_FLOP_PER_TRIP), launches)
    if not np.isfinite(out.read()).all():
        raise RuntimeError(f"{device.info.name}: the FMA roof kernel produced non-finite values")
    for buf in (src, other, dst, out):
        buf.raw.destroy()
    return Roofs(bandwidth=bandwidth, compute=compute)


def bound_of(flops: float, bytes_moved: float, roofs: Roofs) -> str:
    """``"compute"`` when the kernel's intensity is at or above the ridge point, else ``"memory"``."""
    return "compute" if flops / bytes_moved >= roofs.ridge else "memory"


def roof_metrics(name: str, flops: float, bytes_moved: float, seconds: float, roofs: Roofs) -> list[Metric]:
    """``<name>.bound`` and ``<name>.roof_fraction`` for one kernel timed at ``seconds`` per step."""
    intensity = flops / bytes_moved
    attained = flops / seconds
    extra = {
        "intensity_flop_per_byte": intensity,
        "ridge_flop_per_byte": roofs.ridge,
        "roof_bandwidth_bytes_per_s": roofs.bandwidth,
        "roof_compute_flop_per_s": roofs.compute,
    }
    return [
        Metric(f"{name}.bound", bound_of(flops, bytes_moved, roofs), "", "equal", KIND_CATEGORY, extra=extra),
        Metric(
            f"{name}.roof_fraction",
            attained / roofs.attainable(intensity),
            "",
            "higher",
            KIND_CUSTOM,
            judged=False,
            extra=extra,
        ),
    ]


class VulkanRooflineExtension:
    """Adds the roofline verdict to ``measure()`` calls on the vulkan backend (roofs measured once per device)."""

    def after_measure(self, context: MeasureContext) -> list[Metric]:
        """``bound`` and ``roof_fraction`` when the step gave ``flops`` and ``bytes_moved``; else nothing."""
        backend = context.handle.backend
        flops, moved = context.hints.get("flops"), context.hints.get("bytes_moved")
        if backend.name != "vulkan" or not flops or not moved:
            return []
        if any(m.name == f"{context.name}.bound" for m in context.metrics):
            return []  # another roofline extension already judged this step
        roofs = backend.roofs()  # type: ignore[attr-defined]
        return roof_metrics(context.name, float(flops), float(moved), context.timing.median, roofs)
