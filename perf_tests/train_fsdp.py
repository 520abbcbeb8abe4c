"""The seed's FSDP2 training script, sized by device; launch it with torchrun.

    torchrun --nproc_per_node=4 perf_tests/train_fsdp.py                  # CUDA: NCCL, bf16 params
    torchrun --nproc_per_node=2 perf_tests/train_fsdp.py --device cpu     # CPU: gloo, fp32, small dims

MiniLLM with ``fully_shard`` per block and at the root (``MixedPrecisionPolicy(bf16,
fp32)`` on CUDA), AdamW, random tokens. Rank 0 prints the seed's lines
``Step i | Loss: x | Peak VRAM/GPU: y GB``; every rank prints one line for
pytest-gpuperf's ``gpuperf_torchrun`` fixture::

    GPUPERF {"rank": 0, "peak_memory": ..., "tokens_per_s": ..., "step_times": [...], ...}

Peak memory is ``torch.cuda.max_memory_allocated`` over the timed steps on CUDA; on
the CPU it is the torch-allocator peak of one extra step (profiler memory events).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from perf_tests.models import (
    CPU_CONFIG,
    GPU_TEST_CONFIG,
    SEED_CONFIG,
    MiniLLM,
    fully_shard_minillm,
    make_batch,
)

CONFIGS = {"seed": SEED_CONFIG, "test": GPU_TEST_CONFIG, "cpu": CPU_CONFIG}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (device defaults to $GPUPERF_BACKEND, then CUDA when present)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=os.environ.get("GPUPERF_BACKEND") or None)
    parser.add_argument("--config", choices=sorted(CONFIGS), default=None, help="model size (default: by device)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Train for ``--warmup + --steps`` steps on every rank and report per-rank numbers."""
    args = parse_args(argv)
    device_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    mesh = init_device_mesh(device_type, (world,))
    cfg = CONFIGS[args.config or ("test" if device_type == "cuda" else "cpu")]
    torch.manual_seed(0)
    model = fully_shard_minillm(MiniLLM(cfg).to(device), mesh, torch.bfloat16 if device_type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step(seed: int) -> torch.Tensor:
        tokens, targets = make_batch(cfg, device, seed=seed)
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        return loss.detach()

    def sync() -> None:
        if device_type == "cuda":
            torch.cuda.synchronize(device)

    step_times, losses = [], []
    for index in range(args.warmup + args.steps):
        if index == args.warmup and device_type == "cuda":
            sync()
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        started = time.perf_counter()
        loss = step(seed=1000 * rank + index)
        sync()
        if index >= args.warmup:
            step_times.append(time.perf_counter() - started)
        losses.append(float(loss))
    if device_type == "cuda":
        peak = float(torch.cuda.max_memory_allocated(device))
    else:
        from pytest_gpuperf.backends.cpu_memory import measure_cpu_peak_bytes

        peak = float(measure_cpu_peak_bytes(lambda: step(seed=1000 * rank + 999)))
    if rank == 0:
        for index, loss_value in enumerate(losses):
            print(f"Step {index} | Loss: {loss_value:.4f} | Peak VRAM/GPU: {peak / 1e9:.2f} GB", flush=True)
    local_params = sum(p.to_local().numel() * p.element_size() for p in model.parameters())  # type: ignore[attr-defined]
    report = {
        "rank": rank,
        "world_size": world,
        "device": device_type,
        "peak_memory": peak,
        "tokens_per_s": cfg.tokens_per_step / statistics.median(step_times),
        "tokens_per_step": cfg.tokens_per_step,
        "step_times": step_times,
        "loss": losses[-1],
        "param_bytes": local_params,
    }
    print("GPUPERF " + json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
