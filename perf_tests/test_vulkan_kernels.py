"""WGSL compute kernels on a Vulkan (or Metal) adapter through wgpu: bandwidth and tiled matmul.

Each kernel is checked against numpy on random data, measured with GPU timestamp
queries (``gpuperf.measure``: throughput, FLOP/s, bytes/s, peak buffer memory) and
judged against the device's measured roofs by the same roofline as torch steps: the saxpy
must stay memory-bound, the tiled matmul latency-bound (far past the ridge but near no
roof): ``bound=`` on the marker, checked under ``--gpuperf``; ``<name>.bound`` is stored in
the baseline and a change fails the test.
Sizes follow the adapter type: small on a CPU device (lavapipe), large on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from pytest_gpuperf.backends.vulkan import kernels

pytestmark = pytest.mark.gpuperf_backends("vulkan")


@pytest.fixture
def device(gpuperf):
    """The VulkanDevice (a CPU adapter such as lavapipe gets the CPU time tolerance from the core)."""
    return gpuperf.device


@pytest.mark.gpuperf(bound="memory")
def test_saxpy_bandwidth(gpuperf, device):
    """``out = a * x + y`` over float32 vectors: 12 bytes moved per 2 FLOP, the memory side."""
    n = device.max_floats(device.pick(cpu=1 << 23, default=1 << 26))  # 96 MiB / 768 MiB: the roof's size, past caches
    rng = np.random.default_rng(11)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y, out = device.buffer(x_host), device.buffer(y_host), device.empty(n)
    step = kernels.saxpy(device, 1.75, x, y, out)

    step()
    np.testing.assert_allclose(out.read(), np.float32(1.75) * x_host + y_host, rtol=1e-6, atol=1e-6)

    flops, moved = 2.0 * n, 3.0 * 4 * n
    gpuperf.measure(step, name="saxpy", items=n, unit="elements", flops=flops, bytes_moved=moved)


# Its intensity (683 FLOP/B at n = 4096) is far past the ridge, but the kernel reaches 1-4% of the FMA-chain roof on
# the H200 and about 2% on lavapipe (its 64x64 tiles, scalar loads through workgroup memory): near no roof, so the
# roofline calls it latency-bound on both, the class ncu gives kernels with SM and memory both under 60%.
@pytest.mark.gpuperf(bound="latency")
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
