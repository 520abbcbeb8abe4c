"""The seed article's single-device scenarios as perf tests, sized by device (small on CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perf_tests.models import CPU_CONFIG, GPU_TEST_CONFIG, MiniLLM, make_batch, train_step_fn


def _randn(*shape: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


# At the seed's batch of 1024 the step is short on an H200 and bound by autograd's host-side launches: events around
# eager steps read 227-663 us over six sessions of the H200 machine (a VM whose host CPU speed varies). On CUDA the
# judged time is the GPU's own (a CUDA-graph replay of the whole forward + backward: 167-170 us, 0.5% between fresh
# processes), so its throughput is gated again at the default 5%; the eager time and host overhead are recorded
# beside it. Its bound stays informational on CUDA (host-bound vs compute-bound moves with the host's speed).
@pytest.mark.gpuperf(informational={"cuda": ("bound",)})
def test_linear_fp16_forward_backward(gpuperf):
    """The seed's ``nn.Linear(4096, 4096)`` forward + backward at batch 1024 (fp16 on GPUs; fp32, 512 wide on CPU)."""
    dim = gpuperf.pick(cpu=512, default=4096)
    batch = gpuperf.pick(cpu=256, default=1024)
    dtype = gpuperf.pick(cpu=torch.float32, default=torch.float16)
    torch.manual_seed(0)
    layer = nn.Linear(dim, dim).to(gpuperf.device, dtype)
    x = _randn(batch, dim, device=gpuperf.device, dtype=dtype).requires_grad_(True)

    def step():
        layer.zero_grad(set_to_none=True)  # a fresh backward each step, as in training (no fp16 accumulation)
        x.grad = None
        y = layer(x)
        y.sum().backward()
        return y

    flops = 3 * 2 * batch * dim * dim  # forward + two backward GEMMs
    gpuperf.measure(step, items=batch, unit="samples", flops=flops)
    assert layer.weight.grad is not None and torch.isfinite(layer.weight.grad).all()


def test_layernorm_softmax_memory_side(gpuperf):
    """LayerNorm followed by softmax over rows: little arithmetic per byte (the memory side)."""
    rows = gpuperf.pick(cpu=2048, default=16384)
    cols = gpuperf.pick(cpu=1024, default=4096)
    dtype = gpuperf.pick(cpu=torch.float32, default=torch.bfloat16)
    norm = nn.LayerNorm(cols).to(gpuperf.device, dtype)
    x = _randn(rows, cols, device=gpuperf.device, dtype=dtype)

    def step():
        return torch.softmax(norm(x), dim=-1)

    element_size = x.element_size()
    gpuperf.measure(step, items=rows, unit="rows", bytes_moved=2 * 2 * rows * cols * element_size)
    out = step()
    torch.testing.assert_close(out.float().sum(-1), torch.ones(rows, device=gpuperf.device), rtol=2e-2, atol=2e-2)


def test_large_matmul_compute_side(gpuperf):
    """A large square matmul: high arithmetic intensity (the compute side)."""
    n = gpuperf.pick(cpu=1024, default=8192)
    dtype = gpuperf.pick(cpu=torch.float32, default=torch.bfloat16)
    a = _randn(n, n, device=gpuperf.device, dtype=dtype, seed=1)
    b = _randn(n, n, device=gpuperf.device, dtype=dtype, seed=2)

    def step():
        return a @ b

    gpuperf.measure(step, flops=2 * n**3, bytes_moved=3 * n * n * a.element_size())


# CUDA keeps the 5% default: this step's time moved 0.13% between fresh processes on the H200 (gpu/clock_traces.py).
@pytest.mark.gpuperf(time_tolerance={"cpu": 0.3, "mps": 0.3})
def test_minillm_training_step(gpuperf):
    """One MiniLLM training step (forward, backward, AdamW) on one device; tokens/s and peak memory."""
    cfg = gpuperf.pick(cpu=CPU_CONFIG, default=GPU_TEST_CONFIG)
    torch.manual_seed(0)
    model = MiniLLM(cfg).to(gpuperf.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(cfg, gpuperf.device)
    amp = gpuperf.backend_name == "cuda"
    base_step = train_step_fn(model, optimizer, inputs, targets)

    def step():
        with torch.autocast(device_type=gpuperf.device.type, dtype=torch.bfloat16, enabled=amp):
            return base_step()

    first = step()
    gpuperf.measure(step, items=cfg.tokens_per_step, unit="tokens")
    assert torch.isfinite(first)
