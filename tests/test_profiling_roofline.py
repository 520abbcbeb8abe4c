"""Roofline math, FLOP/byte counting on real torch ops, and the measured-roofs cache (real CPU calibration)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.profiling.analytic import HYSTERESIS, count_step, roofline
from pytest_gpuperf.profiling.roofs import CACHE_VERSION, RoofCache, RoofProvider, cache_key, dtype_class
from pytest_gpuperf.profiling.verdict import COMPUTE_BOUND, LATENCY_BOUND, MEMORY_BOUND

# The H200's measured roofs from ../shared/DESIGN.md: 790 TFLOP/s bf16, 4.3 TB/s copy.
P, W = 790e12, 4.3e12


def test_ridge_point_intensity_and_shares_follow_the_roofline_model() -> None:
    n = 8192
    flops, nbytes = 2 * n**3, 3 * n * n * 2
    line = roofline(flops, nbytes, 1.366e-3, P, W)
    assert line.ridge_point == pytest.approx(P / W)
    assert line.arithmetic_intensity == pytest.approx(n / 3 * 2 / 2)  # 2n^3 / 6n^2 = n/3
    assert line.compute_share == pytest.approx(flops / 1.366e-3 / P)
    assert line.roof_share == pytest.approx(max(line.compute_share, line.bandwidth_share))
    assert line.bound == COMPUTE_BOUND


def test_low_intensity_near_the_bandwidth_roof_is_memory_bound() -> None:
    elements = 2**28
    line = roofline(elements, 3 * elements * 2, 0.3626e-3, P, W)  # the bf16 add ncu measured
    assert line.arithmetic_intensity < line.ridge_point
    assert line.bandwidth_share == pytest.approx(3 * elements * 2 / 0.3626e-3 / W)
    assert line.bound == MEMORY_BOUND
    norm = roofline(0, 4 * 16384 * 4096 * 2, 0.25e-3, P, W)  # no FLOPs counted: intensity 0
    assert norm.arithmetic_intensity == 0.0 and norm.bound == MEMORY_BOUND


def test_a_step_reaching_neither_roof_is_latency_bound_and_the_threshold_is_configurable() -> None:
    tiny = roofline(2 * 64**3, 3 * 64 * 64 * 4, 5.184e-6, P, W)
    assert tiny.roof_share < 0.01 and tiny.bound == LATENCY_BOUND
    share = roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W).roof_share  # about 28% of the roof
    assert roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W, latency_share=0.3).bound == LATENCY_BOUND
    assert roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W, latency_share=share / 2).bound == COMPUTE_BOUND
    assert "latency-bound below 30%" in roofline(1, 1, 1, P, W).explain()


def test_noise_near_a_boundary_keeps_the_baseline_class_but_a_clear_change_does_not() -> None:
    flops, nbytes = 2 * 8192**3, 3 * 8192**2 * 2
    seconds_at_threshold = flops / (0.3 * P)
    just_below = roofline(flops, nbytes, seconds_at_threshold * 1.1, P, W, baseline_bound=COMPUTE_BOUND)
    assert just_below.roof_share < 0.3 and just_below.bound == COMPUTE_BOUND and just_below.kept_from_baseline
    assert "baseline's class is kept" in just_below.explain()
    far_below = roofline(
        flops, nbytes, seconds_at_threshold * (1 + HYSTERESIS) * 1.2, P, W, baseline_bound=COMPUTE_BOUND
    )
    assert far_below.bound == LATENCY_BOUND and not far_below.kept_from_baseline
    ridge_bytes = flops / (P / W)
    near_ridge = roofline(flops, ridge_bytes * 1.1, 2e-3, P, W, baseline_bound=COMPUTE_BOUND)
    assert near_ridge.arithmetic_intensity < near_ridge.ridge_point and near_ridge.bound == COMPUTE_BOUND
    assert roofline(flops, ridge_bytes * 2, 2e-3, P, W, baseline_bound=COMPUTE_BOUND).bound == MEMORY_BOUND


def test_zero_peaks_are_rejected() -> None:
    with pytest.raises(ValueError, match="measured peaks"):
        roofline(1, 1, 1, 0, W)
    assert math.isinf(roofline(10, 0, 1, P, W).arithmetic_intensity)


def test_counting_a_matmul_gives_2n3_flops_and_its_three_operands_bytes() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=gen), torch.randn(64, 32, generator=gen)
    count = count_step(lambda: a @ b, lambda: None)
    assert count.flops == 2 * 128 * 64 * 32
    assert count.bytes == (128 * 64 + 64 * 32 + 128 * 32) * 4
    assert count.dtype == "float32"


def test_views_are_free_and_broadcast_operands_count_their_storage_once() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 256, generator=gen)
    row = torch.randn(256, generator=gen)
    count = count_step(lambda: x.view(-1).view(256, 256).t() + row.expand(256, 256), lambda: None)
    assert count.flops == 0 and count.ops == 1
    assert count.bytes == (2 * 256 * 256 + 256) * 4  # x read, result written, the row once
    copied = count_step(lambda: x.t().reshape(-1), lambda: None)  # reshape of a transpose copies
    assert copied.bytes == 2 * 256 * 256 * 4


def test_layer_norm_softmax_counts_each_ops_traffic_and_the_bf16_dtype() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(64, 128, generator=gen).to(torch.bfloat16)
    norm = torch.nn.LayerNorm(128).to(torch.bfloat16)
    with torch.no_grad():
        count = count_step(lambda: torch.softmax(norm(x), dim=-1), lambda: None)
    tensor = 64 * 128 * 2
    assert count.flops == 0
    assert 4 * tensor <= count.bytes <= 4 * tensor + 64 * 128 * 4  # plus weight, bias, mean/rstd
    assert count.dtype == "bfloat16"
    assert dtype_class(count.dtype, "cpu") == "bfloat16" and dtype_class("float16", "cpu") == "bfloat16"


def test_backward_and_optimizer_work_is_counted() -> None:
    torch.manual_seed(3)
    layer = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.randn(32, 64)

    def step() -> None:
        opt.zero_grad()
        layer(x).sum().backward()
        opt.step()

    count = count_step(step, lambda: None)
    assert count.flops == 2 * 2 * 32 * 64 * 64  # forward and weight-gradient GEMMs (x needs no gradient)
    assert count.bytes > 3 * (32 * 64 + 64 * 64) * 4


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RoofProvider, Path]:
    """A real CPU calibration, once for this module."""
    path = tmp_path_factory.mktemp("roofs") / ".gpuperf" / "roofs.json"
    provider = RoofProvider(RoofCache(path))
    backend = CpuBackend()
    provider.roofs(backend, backend.fingerprint() | {"world_size": 1}, "float32")
    return provider, path


def test_calibration_measures_the_cpu_and_caches_it_per_fingerprint(calibrated: tuple[RoofProvider, Path]) -> None:
    provider, path = calibrated
    data = json.loads(path.read_text())
    assert data["version"] == CACHE_VERSION
    [(key, entry)] = data["devices"].items()
    assert key.startswith("cpu-") and key.endswith(f"-t{torch.get_num_threads()}")
    flops = entry["compute"]["float32"]["peak_flops"]
    bandwidth = entry["bandwidth"]["peak_bandwidth"]
    assert 1e8 < flops < 1e14 and 1e8 < bandwidth < 1e12
    assert entry["compute"]["float32"]["matmul_n"] == 1024
    assert provider.calibrated == [f"{key} (float32)"]


def test_a_second_session_reads_the_cache_instead_of_measuring(calibrated: tuple[RoofProvider, Path]) -> None:
    _, path = calibrated
    backend = CpuBackend()
    fingerprint = backend.fingerprint() | {"world_size": 1}
    again = RoofProvider(RoofCache(path))
    roofs = again.roofs(backend, fingerprint, "float32")
    assert again.calibrated == []
    stored = json.loads(path.read_text())["devices"][cache_key(fingerprint)]
    assert roofs.peak_flops == stored["compute"]["float32"]["peak_flops"]
    assert roofs.dtype_class == "float32"


def test_a_cache_of_another_version_or_broken_json_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "roofs.json"
    path.write_text(json.dumps({"version": CACHE_VERSION + 1, "devices": {"x": {}}}))
    assert RoofCache(path).load() == {}
    path.write_text("{not json")
    assert RoofCache(path).load() == {}
    RoofCache(path).store("k", {"bandwidth": {"peak_bandwidth": 1.0}})
    assert RoofCache(path).load() == {"k": {"bandwidth": {"peak_bandwidth": 1.0}}}
