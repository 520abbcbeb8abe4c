"""The vulkan backend on a real Vulkan device (lavapipe here and in CI): kernels, timing, memory, roofs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pytest_gpuperf.backends.vulkan import VulkanBackend, kernels
from pytest_gpuperf.backends.vulkan.device import NothingRecordedError
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND, MEMORY_BOUND, Roofs, classify

wgpu = pytest.importorskip("wgpu", reason="the vulkan backend needs wgpu (pip install 'pytest-gpuperf[vulkan]')")


@pytest.fixture(scope="module")
def backend() -> VulkanBackend:
    """A vulkan backend on the default adapter; fails (not skips) when no Vulkan device is installed."""
    found = VulkanBackend()
    availability = found.availability()
    assert availability.available, f"no Vulkan device here: {availability.reason} (CI installs mesa-vulkan-drivers)"
    return found


@pytest.fixture
def device(backend: VulkanBackend):
    """The backend's VulkanDevice, with the buffers a test allocated destroyed afterwards."""
    yield backend.device()
    backend.reset_state()


def _random(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32)


def test_fingerprint_names_adapter_driver_timer_and_cooperative_matrix(backend: VulkanBackend) -> None:
    fp = backend.fingerprint()
    info, _ = backend.adapter()
    assert fp["backend"] == "vulkan" and fp["api"] in ("Vulkan", "Metal")
    assert fp["device_name"] == info.name and fp["device_type"] == info.device_type
    assert fp["driver"] == info.driver and fp["driver"]
    assert fp["timestamp_query"] == info.timestamp_query
    assert fp["timer"] == ("gpu-timestamp-query" if info.timestamp_query else fp["timer"])
    assert fp["cooperative_matrix"] in (True, False, "unknown")
    assert fp["arch"] == f"{info.backend}-{info.device_type}".lower()


def test_loader_probe_reports_the_same_device_with_its_extensions(backend: VulkanBackend) -> None:
    from pytest_gpuperf.backends.vulkan.probe import find_physical_device

    info, _ = backend.adapter()
    physical = find_physical_device(info.name, info.vendor_id, info.device_id)
    assert physical is not None, "libvulkan could not be asked through ctypes"
    assert physical.name == info.name
    assert "VK_KHR_maintenance1" in physical.extensions  # core to every Vulkan 1.1+ driver
    assert physical.device_local_bytes > 0
    assert backend.fingerprint()["cooperative_matrix"] == ("VK_KHR_cooperative_matrix" in physical.extensions)


def test_saxpy_and_matmul_kernels_match_numpy_on_random_data(device) -> None:
    x_host, y_host = _random(4096, 1), _random(4096, 2)
    out = device.empty(4096)
    kernels.saxpy(device, -0.5, device.buffer(x_host), device.buffer(y_host), out)()
    np.testing.assert_allclose(out.read(), np.float32(-0.5) * x_host + y_host, rtol=1e-6, atol=1e-6)

    m, n, k = 70, 130, 33  # not multiples of the 64x64 tile: exercises the edge guards
    a_host, b_host = _random(m * k, 3).reshape(m, k), _random(k * n, 4).reshape(k, n)
    c = device.empty((m, n))
    kernels.matmul(device, device.buffer(a_host), device.buffer(b_host), c, m, n, k)()
    np.testing.assert_allclose(c.read(), a_host @ b_host, rtol=1e-4, atol=1e-4)


def test_large_grids_fold_into_two_dimensions() -> None:
    assert kernels.linear_grid(256 * 65535) == (65535, 1)
    x, y = kernels.linear_grid(256 * 65536)
    assert y == 2 and x * y * 256 >= 256 * 65536 and x <= kernels.MAX_GROUPS_PER_DIM


def test_fma_kernel_over_a_folded_grid_runs_every_thread(device) -> None:
    threads = 256 * 65536  # 65536 workgroups of 256: one more than fits in x, so two rows in y
    out = device.empty(threads)
    kernels.fma_chain(device, out, trips=1)()
    seed = np.arange(1024, dtype=np.float32) * np.float32(1e-4)  # the kernel's seed depends on i % 1024
    lanes = seed[:, None] + np.array([0.0, 0.1, 0.2, 0.3], dtype=np.float32)
    chains = lanes[:, None, :] + (np.arange(8, dtype=np.float32) * np.float32(0.01))[None, :, None]
    per_seed = (chains * np.float32(0.9999) + np.float32(0.0001)).sum(axis=(1, 2))
    np.testing.assert_allclose(out.read(), np.tile(per_seed, threads // 1024), rtol=1e-5)
    assert device.max_floats(1 << 40) * 4 <= device.max_binding_bytes


def test_time_block_uses_gpu_timestamps_within_the_host_wall_time(backend: VulkanBackend, device) -> None:
    if not device.timestamps:
        pytest.fail(f"{device.info.name} offers no timestamp-query; lavapipe and the H200 both do")
    n = 1 << 18
    step = kernels.saxpy(device, 2.0, device.buffer(_random(n, 6)), device.buffer(_random(n, 7)), device.empty(n))
    step()
    device.synchronize()
    start = time.perf_counter()
    gpu = backend.time_block(step, 4)
    wall = time.perf_counter() - start
    assert 0 < gpu <= wall * 1.01, f"GPU time {gpu:.6f}s must be positive and within the wall time {wall:.6f}s"
    with device.timed() as timer:
        step()
        step()
    assert timer.dispatches == 2 and len(timer.passes) == 1 and timer.seconds > 0


def test_time_block_raises_when_the_step_records_no_dispatch(backend: VulkanBackend) -> None:
    with pytest.raises(NothingRecordedError, match=r"gpuperf\.device\.kernel"):
        backend.time_block(lambda: None, 3)


def test_host_clock_fallback_on_a_device_opened_without_timestamp_query() -> None:
    host_timed = VulkanBackend()
    host_timed.force_host_timer = True
    device = host_timed.device()
    try:
        assert not device.timestamps
        assert host_timed.fingerprint()["timer"].startswith("host-clock")
        n = 1 << 16
        out = device.empty(n)
        step = kernels.saxpy(device, 3.0, device.buffer(_random(n, 8)), device.buffer(_random(n, 9)), out)
        assert host_timed.time_block(step, 3) > 0
        assert "host clock" in host_timed.memory_note()
        with pytest.raises(RuntimeError, match="no timestamp-query"), device.timed():
            pass
    finally:
        host_timed.close()


def test_peak_memory_counts_inputs_and_buffers_allocated_inside_the_step(backend: VulkanBackend, device) -> None:
    n = 1 << 14
    x, y = device.buffer(_random(n, 10)), device.buffer(_random(n, 11))
    inputs = device.live_bytes

    def step() -> object:
        out = device.empty(n)
        kernels.saxpy(device, 1.0, x, y, out)()
        return out

    peak = backend.measure_peak_memory(step)
    assert peak == inputs + 4 * n + 16  # the output plus the saxpy kernel's 16-byte uniform
    assert device.live_bytes == inputs  # the step's buffers were freed with its result
    backend.reset_state()
    assert device.live_bytes == 0 and device.peak_bytes == 0


def test_a_workload_on_untracked_buffers_survives_reset_state(backend: VulkanBackend) -> None:
    device = backend.device()
    n = 1 << 18
    rng = np.random.default_rng(1234)
    x = device.buffer(rng.standard_normal(n, dtype=np.float32), tracked=False)
    y = device.buffer(rng.standard_normal(n, dtype=np.float32), tracked=False)
    reference = kernels.saxpy(device, 1.5, x, y, device.empty(n, tracked=False))
    assert reference is not None
    backend.reset_state()  # destroys tracked (test) buffers only
    assert backend.time_block(reference, 2) > 0


def test_measured_roofs_classify_saxpy_as_memory_and_big_matmul_as_compute(backend: VulkanBackend) -> None:
    compute = backend.measure_roof("compute", "float32")
    dram = backend.measure_roof("dram", "float32")
    assert compute is not None and dram is not None
    assert dram["bandwidth"] > 1e8 and compute["peak_flops"] > 1e8
    assert backend.measure_roof("cache", "float32") is None  # no cache roof on Vulkan: DRAM judges every step
    roofs = Roofs(peak_flops=compute["peak_flops"], bandwidth=dram["bandwidth"])
    n = 1 << 20
    # At the roof's own rate each kernel reaches 100% of its roof; only the side of the ridge decides.
    saxpy = classify(2.0 * n, 12.0 * n, 12.0 * n / roofs.bandwidth, roofs)
    matmul = classify(2.0 * 4096**3, 12.0 * 4096**2, 2.0 * 4096**3 / roofs.peak_flops, roofs)
    assert (saxpy.bound, matmul.bound) == (MEMORY_BOUND, COMPUTE_BOUND)


def test_a_cpu_adapter_reads_the_wait_of_every_thread_of_the_process(backend: VulkanBackend) -> None:
    # lavapipe's rasterizer threads run the step; the calling thread only waits on a fence.
    expected = "process" if backend.is_host_cpu() else "thread"
    assert backend.wait_scope() == expected
