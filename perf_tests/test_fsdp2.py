"""The seed's FSDP2 workload as distributed perf tests: 2 gloo ranks on the CPU, every GPU (NCCL) on CUDA.

The bodies run on every rank of a reused rank pool (``@pytest.mark.gpuperf_distributed``);
each rank measures its own training step, and the pytest process judges per-rank
peak memory (``rank<N>.step.peak_memory``), the slowest rank's tokens/s and the
imbalance between ranks against the baselines of this world size.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from perf_tests.models import (
    CPU_CONFIG,
    GPU_TEST_CONFIG,
    MiniLLM,
    MiniLLMConfig,
    fully_shard_minillm,
    make_batch,
    train_step_fn,
)

pytestmark = pytest.mark.gpuperf_backends("cpu", "cuda")

#: 2 ranks on the CPU; one rank per visible GPU on CUDA (world size 1 on a single H200).
WORLD = {"cpu": 2, "cuda": "all"}
TRAIN_SCRIPT = Path(__file__).with_name("train_fsdp.py")


def _mesh(rank):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(rank.device.type, (rank.world_size,))


def _param_bytes(module: nn.Module, local: bool) -> int:
    """Bytes of the module's parameters: each rank's shard (``local``) or the whole tensors."""
    total = 0
    for param in module.parameters():
        tensor = param.to_local() if local and hasattr(param, "to_local") else param
        total += tensor.numel() * tensor.element_size()
    return total


# On the CPU, gloo's worker threads allocate next to the training thread, so the order of allocations and frees
# (and the step's peak) moved by 0.75 MiB (+7.6%) between unchanged runs; on CUDA the allocator's peak is exact.
@pytest.mark.gpuperf(time_tolerance={"cpu": 0.3, "mps": 0.3, "cuda": 0.10}, memory_tolerance={"cpu": 0.15})
@pytest.mark.gpuperf_distributed(world_size=WORLD)
def test_fsdp2_training_step_tokens_per_second_and_peak_memory(gpuperf, gpuperf_rank):
    """One FSDP2 training step (all-gather, forward, backward, reduce-scatter, AdamW) on every rank."""
    cfg = gpuperf.pick(cpu=CPU_CONFIG, cuda=GPU_TEST_CONFIG)
    cuda = gpuperf_rank.backend == "cuda"
    device = gpuperf_rank.device
    torch.manual_seed(0)
    model = fully_shard_minillm(MiniLLM(cfg).to(device), _mesh(gpuperf_rank), torch.bfloat16 if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(cfg, device, seed=100 + gpuperf_rank.rank)

    step = train_step_fn(model, optimizer, inputs, targets)
    first = step()
    gpuperf.measure(step, items=cfg.tokens_per_step, unit="tokens")
    assert torch.isfinite(first), f"rank {gpuperf_rank.rank}: loss is {first}"


@pytest.mark.gpuperf_distributed(world_size=WORLD)
def test_fsdp2_really_shards_parameters_one_nth_per_rank(gpuperf, gpuperf_rank):
    """Each rank holds about 1/N of the model's parameter bytes, as Shard(0) DTensors."""
    from torch.distributed.tensor import DTensor, Shard

    cfg = gpuperf.pick(cpu=CPU_CONFIG, cuda=GPU_TEST_CONFIG)
    model = MiniLLM(cfg).to(gpuperf_rank.device)
    full = _param_bytes(model, local=False)
    fully_shard_minillm(model, _mesh(gpuperf_rank))
    local = _param_bytes(model, local=True)
    gpuperf.record("param_memory", local, "B", "lower")
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), f"{name} is not sharded (a {type(param).__name__})"
        assert param.placements == (Shard(0),), f"{name} has placements {param.placements}, expected (Shard(0),)"
    expected = full / gpuperf_rank.world_size
    assert abs(local - expected) <= 0.02 * expected, (
        f"rank {gpuperf_rank.rank} holds {local} parameter bytes, "
        f"but 1/{gpuperf_rank.world_size} of the model's {full} is {expected:.0f}"
    )


@pytest.mark.gpuperf_distributed(world_size=WORLD)
def test_fsdp2_gradients_match_a_single_process_reference(gpuperf_backend, gpuperf_rank):
    """Gradients after FSDP2's reduce-scatter equal one process's gradients over the global batch (averaged)."""
    world = gpuperf_rank.world_size
    cfg = MiniLLMConfig(vocab=256, dim=64, heads=4, layers=2, batch=2, seq=16)
    device = gpuperf_rank.device
    torch.manual_seed(0)
    reference = MiniLLM(cfg).to(device)
    model = fully_shard_minillm(copy.deepcopy(reference), _mesh(gpuperf_rank))
    global_cfg = MiniLLMConfig(**{**cfg.__dict__, "batch": cfg.batch * world})
    inputs, targets = make_batch(global_cfg, device, seed=7)
    mine = slice(gpuperf_rank.rank * cfg.batch, (gpuperf_rank.rank + 1) * cfg.batch)

    def loss_of(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(module(x).flatten(0, 1).float(), y.flatten())

    loss_of(reference, inputs, targets).backward()
    loss_of(model, inputs[mine], targets[mine]).backward()
    for (name, param), ref in zip(model.named_parameters(), reference.parameters(), strict=True):
        grad = param.grad.full_tensor()
        scale = (grad.norm() / ref.grad.norm()).item() if ref.grad.norm() > 0 else 1.0
        summed = world > 1 and abs(scale - world) < 0.1
        hint = " (summed over ranks instead of averaged, as older gloo builds did)" if summed else ""
        torch.testing.assert_close(
            grad,
            ref.grad,
            rtol=1e-4,
            atol=1e-5,
            msg=lambda m, n=name, s=scale, h=hint: f"{n}: {m}; FSDP/reference gradient norm ratio {s:.3f}{h}",
        )


# A whole script run is a few steps in a fresh process: its tokens/s moved by 5% between two runs on the H200, a
# spread its own step samples cannot show, so the script's throughput gets 10% on CUDA, twice that spread (a
# suspected regression is confirmed by a second run; peak memory keeps 5%). On the CPU the script's peak moves
# with gloo's worker threads like the training test's (+7.6% seen unchanged).
@pytest.mark.gpuperf(time_tolerance={"cuda": 0.10}, memory_tolerance={"cpu": 0.15})
def test_train_fsdp_script_on_ranks_through_torchrun(gpuperf, gpuperf_torchrun):
    """The seed's script under ``python -m torch.distributed.run``; per-rank peak memory and tokens/s judged."""
    nproc = gpuperf.pick(cpu=2, cuda=max(1, torch.cuda.device_count()))
    result = gpuperf_torchrun.run(TRAIN_SCRIPT, "--steps", "3", nproc_per_node=nproc, timeout=240)
    assert sorted(result.report.ranks) == list(range(nproc)), result.output[-2000:]
    assert result.report.seed_lines, "rank 0 printed no 'Step i | Loss | Peak VRAM/GPU' line"
    assert all(r.peak_memory and r.peak_memory > 0 for r in result.report.ranks.values())
