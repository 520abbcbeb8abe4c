"""CUDA-only parts of the measuring loop: whole-step graph timing, its CUPTI and event fallbacks, NVML, L2 flushing.

These need a CUDA device; ``gpu/trust.sh`` runs them on the H200.
"""

from __future__ import annotations

import pytest
import torch

from pytest_gpuperf.timing import MeasureConfig, measure_time

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run by gpu/trust.sh)")


@pytest.fixture(scope="module")
def cuda():
    """The CUDA backend."""
    from pytest_gpuperf.backends.cuda import CudaBackend

    return CudaBackend()


def _config(**kwargs) -> MeasureConfig:
    return MeasureConfig(max_time=0.5, min_samples=8, target_precision=0.02, **kwargs)


def test_short_steps_are_timed_as_graph_replays_and_beat_launch_loops(cuda):
    x = torch.randn(4096, device="cuda")
    step = lambda: x.mul_(1.0001)  # noqa: E731 - a ~2 us kernel
    graphed = measure_time(cuda, step, _config(cuda_graph="auto"))
    looped = measure_time(cuda, step, _config(cuda_graph="off", cupti=False))
    assert graphed.method == "cuda_graph" and looped.method == "events"
    assert graphed.typical < looped.typical
    assert graphed.typical < 20e-6


def test_a_step_that_syncs_with_the_host_falls_back_to_event_loops(cuda):
    x = torch.randn(4096, device="cuda")
    result = measure_time(cuda, lambda: float(x.sum().item()), _config(cuda_graph="on", cupti=False))
    assert result.method == "events"
    assert "no CUDA graph" in result.method_note and "host time included" in result.method_note


def test_a_step_that_syncs_is_timed_by_its_kernels_through_cupti(cuda):
    x = torch.randn(1 << 20, device="cuda")
    result = measure_time(cuda, lambda: float(x.sum().item()), _config())
    assert result.method == "cupti" and result.eager_samples and result.typical > 0
    assert "no CUDA graph" in result.method_note


def test_a_whole_forward_backward_step_is_captured_and_its_eager_time_kept(cuda):
    torch.manual_seed(0)
    layer = torch.nn.Linear(1024, 1024).to("cuda", torch.float16)
    x = torch.randn(256, 1024, device="cuda", dtype=torch.float16, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    result = measure_time(cuda, step, _config())
    assert result.method == "cuda_graph", result.method_note
    assert len(result.eager_samples) == len(result.samples) and result.host_overhead is not None
    assert result.clocks is not None and result.clocks.get("sm_clock_mhz", 0) > 0, result.clocks
    assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()


def test_a_failed_capture_of_a_non_capturable_optimizer_leaves_the_rng_working(cuda):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Dropout(0.1)).cuda()
    opt = torch.optim.AdamW(model.parameters(), foreach=True)  # capturable=False: capture fails at step()
    x = torch.randn(64, 256, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    result = measure_time(cuda, step, _config())
    assert result.method in ("cupti", "events") and "no CUDA graph" in result.method_note
    assert torch.rand(4, device="cuda").shape == (4,)  # random ops still work after the failed capture
    step()
    torch.cuda.synchronize()


def test_graph_memory_is_released_after_measuring(cuda):
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    measure_time(cuda, lambda: x * 2.0, _config(cuda_graph="on"))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before + (1 << 20)


def test_l2_flush_makes_a_cache_resident_read_slower(cuda):
    from pytest_gpuperf.timing.l2_flush import cache_bytes

    assert cache_bytes(torch.device("cuda")) == torch.cuda.get_device_properties(0).L2_cache_size
    x = torch.randn(4 << 20, device="cuda")  # 16 MiB: fits in the H200's 60 MiB L2
    warm = measure_time(cuda, lambda: x.sum(), _config(cuda_graph="off"))
    cold = measure_time(cuda, lambda: x.sum(), _config(l2_flush=True))
    assert cold.method == "l2_flush"
    assert cold.typical > warm.typical


def test_a_capture_invalidated_by_a_synchronize_leaves_the_rng_working(cuda):
    x = torch.randn(1024, device="cuda")

    def step():
        torch.nn.functional.dropout(x, 0.1)
        torch.cuda.synchronize()

    result = measure_time(cuda, step, _config(cupti=False))
    assert result.method == "events" and "no CUDA graph" in result.method_note
    assert torch.nn.functional.dropout(x, 0.1).shape == x.shape  # "Offset increment outside graph capture" before


def test_nvml_reads_the_sm_clock_of_the_current_device():
    from pytest_gpuperf.timing.cuda.nvml import current_device_reader

    reading = current_device_reader()()
    assert reading.sm_clock_mhz > 0 and reading.reasons >= 0
