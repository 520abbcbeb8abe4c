"""CUDA-only parts of the measuring loop: graph timing of short steps, its fallback, L2 flushing.

These need a CUDA device; ``gpu/trust.sh`` runs them on the H200.
"""

from __future__ import annotations

import pytest
import torch

from pytest_gpuperf.measure import MeasureConfig, measure_time

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
    looped = measure_time(cuda, step, _config(cuda_graph="off"))
    assert graphed.method == "cuda_graph" and looped.method == "events"
    assert graphed.typical < looped.typical
    assert graphed.typical < 20e-6


def test_a_step_that_syncs_with_the_host_falls_back_to_event_loops(cuda):
    x = torch.randn(4096, device="cuda")
    result = measure_time(cuda, lambda: float(x.sum().item()), _config(cuda_graph="on"))
    assert result.method == "events"
    assert "capture failed" in result.method_note


def test_graph_memory_is_released_after_measuring(cuda):
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    measure_time(cuda, lambda: x * 2.0, _config(cuda_graph="on"))
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before + (1 << 20)


def test_l2_flush_makes_a_cache_resident_read_slower(cuda):
    from pytest_gpuperf.l2_flush import cache_bytes

    assert cache_bytes(torch.device("cuda")) == torch.cuda.get_device_properties(0).L2_cache_size
    x = torch.randn(4 << 20, device="cuda")  # 16 MiB: fits in the H200's 60 MiB L2
    warm = measure_time(cuda, lambda: x.sum(), _config(cuda_graph="off"))
    cold = measure_time(cuda, lambda: x.sum(), _config(l2_flush=True))
    assert cold.method == "l2_flush"
    assert cold.typical > warm.typical
