"""WGSL compute kernels on a Vulkan (or Metal) adapter through wgpu: bandwidth and tiled matmul.

Each kernel is checked against numpy on random data, measured with GPU timestamp
queries (``gpuperf.measure``: throughput, FLOP/s, bytes/s, peak buffer memory) and
judged against the device's measured roofs: the saxpy must stay memory-bound, the
matmul compute-bound (``<name>.bound``; a change fails the test under ``--gpuperf``).
Sizes follow the adapter type: small on a CPU device (lavapipe), large on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.vulkan import kernels
from pytest_gpuperf.vulkan.roofline import bound_of

pytestmark = pytest.mark.gpuperf_backends("vulkan")


@pytest.fixture
def device(gpuperf):
    """The VulkanDevice (a CPU adapter such as lavapipe gets the CPU time tolerance from the core)."""
    return gpuperf.device


def _expect_bound(gpuperf, name: str, expected: str, flops: float, bytes_moved: float) -> None:
    """Under ``--gpuperf`` the roofline verdict recorded for ``name`` must be ``expected``."""
    if not gpuperf.enabled:
        return
    roofs = gpuperf.backend.roofs()
    got = bound_of(flops, bytes_moved, roofs)
    assert got == expected, (
        f"{gpuperf.node_id}: {name}.bound is {got!r}, expected {expected!r} (intensity "
        f"{flops / bytes_moved:.2f} FLOP/B vs ridge {roofs.ridge:.2f} FLOP/B); resize the kernel or fix the roofs"
    )


def test_saxpy_bandwidth(gpuperf, device):
    """``out = a * x + y`` over float32 vectors: 12 bytes moved per 2 FLOP, the memory side."""
    n = device.max_floats(device.pick(cpu=1 << 22, default=1 << 26))  # 48 MiB / 768 MiB: past the caches
    rng = np.random.default_rng(11)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y, out = device.buffer(x_host), device.buffer(y_host), device.empty(n)
    step = kernels.saxpy(device, 1.75, x, y, out)

    step()
    np.testing.assert_allclose(out.read(), np.float32(1.75) * x_host + y_host, rtol=1e-6, atol=1e-6)

    flops, moved = 2.0 * n, 3.0 * 4 * n
    gpuperf.measure(step, name="saxpy", items=n, unit="elements", flops=flops, bytes_moved=moved)
    _expect_bound(gpuperf, "saxpy", "memory", flops, moved)


def test_tiled_matmul_compute(gpuperf, device):
    """``c = a @ b`` in float32 with 64x64 shared-memory tiles: ``2 n^3`` FLOP on ``3 n^2`` floats."""
    n = device.pick(cpu=256, default=4096)
    rng = np.random.default_rng(12)
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    a, b, c = device.buffer(a_host), device.buffer(b_host), device.empty((n, n))
    step = kernels.matmul(device, a, b, c, n, n, n)

    step()
    expected = a_host.astype(np.float64) @ b_host.astype(np.float64)
    np.testing.assert_allclose(c.read(), expected, rtol=1e-3, atol=1e-3 * np.sqrt(n))

    flops, moved = 2.0 * n**3, 3.0 * 4 * n * n
    gpuperf.measure(step, name="matmul", items=2.0 * n**3, unit="FLOP", flops=flops, bytes_moved=moved)
    _expect_bound(gpuperf, "matmul", "compute", flops, moved)
