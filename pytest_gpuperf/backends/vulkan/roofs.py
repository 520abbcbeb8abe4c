"""Measured roofs of a Vulkan device: the bandwidth and FMA kernels the roofline module asks for.

The roofs are *measured*, not looked up: the bandwidth roof is the best rate of the
vec4 copy and saxpy kernels over buffers of 32 MiB (CPU device) or 256 MiB (GPU), the
compute roof the best rate of eight independent float32 FMA chains per thread
(:mod:`pytest_gpuperf.backends.vulkan.kernels`), each the best of :data:`ROOF_REPEATS`
(more when the roofline asks again because a step beat the roof)
timed blocks. The classification (memory-, compute-, latency-, host-bound, with its
hysteresis) is the roofline module's, the same as on torch backends
(:mod:`pytest_gpuperf.profiling.roofline`); a step gets it when it passes
``measure(flops=..., bytes_moved=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.vulkan.device import VulkanDevice

ROOF_REPEATS = 5


def _best_rate(
    device: VulkanDevice, launch: Callable[[], None], work: float, launches: int, tries: int = ROOF_REPEATS
) -> float:
    """Most ``work`` units per second over ``tries`` timed blocks of ``launches`` dispatches."""
    launch()
    device.synchronize()
    best = 0.0
    for _ in range(tries):
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


def measure_bandwidth(device: VulkanDevice, tries: int = ROOF_REPEATS) -> float:
    """Best bytes/s of the copy and saxpy kernels (read + write of every byte)."""
    import numpy as np

    from pytest_gpuperf.backends.vulkan import kernels

    floats = device.max_floats(device.pick(cpu=1 << 23, default=1 << 26))  # 32 MiB (CPU device), 256 MiB (GPU)
    rng = np.random.default_rng(7)
    src = device.buffer(rng.standard_normal(floats, dtype=np.float32), tracked=False)
    dst = device.empty(floats, tracked=False)
    other = device.buffer(rng.standard_normal(floats, dtype=np.float32), tracked=False)
    launches = device.pick(cpu=3, default=10)
    copy = kernels.copy(device, src, dst)
    saxpy = kernels.saxpy(device, 0.5, src, other, dst)
    bandwidth = max(
        _best_rate(device, copy, 2.0 * src.nbytes, launches, tries),
        _best_rate(device, saxpy, 3.0 * src.nbytes, launches, tries),
    )

    for buf in (src, other, dst):
        buf.raw.destroy()
    return bandwidth


def measure_compute(device: VulkanDevice, tries: int = ROOF_REPEATS) -> float:
    """Best float32 FLOP/s of the FMA-chain kernel."""
    import numpy as np

    from pytest_gpuperf.backends.vulkan import kernels

    launches = device.pick(cpu=3, default=10)
    threads = device.pick(cpu=1 << 14, default=1 << 20)
    trips = device.pick(cpu=256, default=1024)
    out = device.empty(threads, tracked=False)
    fma = kernels.fma_chain(device, out, trips)
    compute = _best_rate(device, fma, float(threads * trips * kernels.FMA_FLOP_PER_TRIP), launches, tries)
    if not np.isfinite(out.read()).all():
        raise RuntimeError(f"{device.info.name}: the FMA roof kernel produced non-finite values")
    out.raw.destroy()
    return compute
