"""Rank pool vs one launch per test: 10 small FSDP2 tests at world size 2 on CPU (gloo) or CUDA (NCCL).

    python benchmarks/bench_rank_pool.py [--tests 10] [--world-size 2] [--device cpu|cuda]

Both modes use the same path a ``@pytest.mark.gpuperf_distributed`` test takes
(:class:`pytest_gpuperf.distributed.manager.PoolManager`: ``python -m
torch.distributed.run`` + the pool worker); "per-test launch" starts fresh ranks for
every test (``gpuperf_no_dist_pool``), "pool" starts them once. Each test builds
a MiniLLM, shards it with ``fully_shard`` per block and at the root, and runs 3
training steps: CPU sizes and fp32 on gloo; on CUDA (NCCL, one GPU per rank) the GPU
test sizes (``--config test``, about 0.1-0.3 s per test on an H200) or the seed's,
with ``MixedPrecisionPolicy(bf16, fp32)``. "own work" is the slowest rank's time
inside the test body; the marginal cost per test is (wall time after the pool is up
- own work) / tests. The last lines are markdown table rows for ``docs/PERFORMANCE.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


DIST = {"cpu": "gloo", "cuda": "NCCL"}
#: Model sizes per ``--config`` (perf_tests.models); each device's default first.
CONFIG_NAMES = {"cpu": ("cpu",), "cuda": ("test", "seed")}


def fsdp2_training_test(gpuperf_rank, config: str = "cpu") -> None:  # type: ignore[no-untyped-def]
    """The benchmarked test body: shard a MiniLLM with FSDP2 on this rank's device and train 3 steps."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh

    from perf_tests.models import CPU_CONFIG, GPU_TEST_CONFIG, SEED_CONFIG, MiniLLM, fully_shard_minillm, make_batch

    cfg = {"cpu": CPU_CONFIG, "test": GPU_TEST_CONFIG, "seed": SEED_CONFIG}[config]
    device = gpuperf_rank.device
    cuda = device.type == "cuda"
    mesh = init_device_mesh(device.type, (gpuperf_rank.world_size,))
    with device:  # parameters initialised on the rank's device
        model = MiniLLM(cfg)
    model = fully_shard_minillm(model, mesh, torch.bfloat16 if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(cfg, device, seed=gpuperf_rank.rank)
    for _ in range(3):
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert torch.isfinite(loss)  # .item() inside: waits for the device's work
    if cuda:
        torch.cuda.synchronize(device)


def run_mode(reuse: bool, tests: int, world_size: int, device: str = "cpu", config: str = "cpu") -> dict[str, float]:
    """Run ``tests`` tests through a PoolManager; return wall, start and own-work seconds."""
    from pytest_gpuperf.distributed.manager import PoolManager
    from pytest_gpuperf.distributed.tasks import RankTask

    here = Path(__file__).resolve()
    manager = PoolManager(reuse=reuse)
    own = 0.0
    started = time.perf_counter()
    for index in range(tests):
        task = RankTask(
            node_id=f"bench::test_{index}",
            module_name=here.stem,
            module_file=str(here),
            qualname=fsdp2_training_test.__qualname__,
            backend=device,
            kwargs={"config": config},
            wants=("gpuperf_rank",),
            seed=index,
            sys_path=[str(here.parent), str(ROOT)],
        )
        outcome = manager.run(task, world_size, timeout=300)
        failed = [r for r in outcome.results.values() if r.status != "ok"]
        if failed or outcome.hung or outcome.died:
            raise SystemExit(f"test {index} failed: {failed[0].traceback if failed else outcome}")
        own += max(r.seconds for r in outcome.results.values())
    wall = time.perf_counter() - started
    manager.close()
    return {"wall": wall, "start": manager.stats.start_seconds, "own": own, "starts": manager.stats.started}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--config`` defaults to the device's test size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--device", choices=sorted(DIST), default="cpu", help="cpu: gloo; cuda: NCCL, a GPU per rank")
    parser.add_argument("--config", choices=["cpu", "test", "seed"], default=None, help="MiniLLM size")
    args = parser.parse_args(argv)
    args.config = args.config or CONFIG_NAMES[args.device][0]
    if args.config not in CONFIG_NAMES[args.device]:
        parser.error(f"--config {args.config} does not fit --device {args.device}: use {CONFIG_NAMES[args.device]}")
    return args


def device_label(device: str, world_size: int) -> str:
    """What the ranks ran on, for the table: ``CPU (gloo)`` or ``2x NVIDIA H200 (NCCL)``."""
    if device == "cpu":
        return "CPU (gloo)"
    import torch

    return f"{world_size}x {torch.cuda.get_device_name(0)} (NCCL)"


def markdown_rows(label: str, args: argparse.Namespace, rows: dict[str, dict[str, float]]) -> list[str]:
    """Rows for docs/PERFORMANCE.md: device, world size, config, mode, starts, seconds, overhead per test."""
    header = [
        "| device | world size | MiniLLM | mode | rank starts | wall s | starting ranks s | own work s "
        "| overhead per test s |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines = []
    for name, row in rows.items():
        overhead = (row["wall"] - row["own"]) / args.tests
        lines.append(
            f"| {label} | {args.world_size} | {args.config} | {name} | {row['starts']:.0f} | {row['wall']:.2f} | "
            f"{row['start']:.2f} | {row['own']:.2f} | {overhead:.3f} |"
        )
    return header + lines


def main(argv: list[str] | None = None) -> None:
    """Print one table row per mode, then the ratio and the pool's marginal cost per test."""
    args = parse_args(argv)
    from pytest_gpuperf.distributed.env import world_size_problem

    problem = world_size_problem(args.device, args.world_size)
    if problem is not None:
        raise SystemExit(f"bench_rank_pool.py --device {args.device} --world-size {args.world_size}: {problem}")
    label = device_label(args.device, args.world_size)
    pool = run_mode(True, args.tests, args.world_size, args.device, args.config)
    fresh = run_mode(False, args.tests, args.world_size, args.device, args.config)
    print(f"{args.tests} FSDP2 tests, world size {args.world_size}, {label}")
    print(f"{'mode':<18}{'starts':>7}{'wall s':>9}{'starting s':>12}{'own work s':>12}{'overhead/test s':>17}")
    for name, row in (("pool", pool), ("per-test launch", fresh)):
        overhead = (row["wall"] - row["own"]) / args.tests
        print(
            f"{name:<18}{row['starts']:>7.0f}{row['wall']:>9.2f}{row['start']:>12.2f}{row['own']:>12.2f}{overhead:>17.3f}"
        )
    marginal = (pool["wall"] - pool["start"] - pool["own"]) / args.tests
    print(f"speed-up of the pool: {fresh['wall'] / pool['wall']:.2f}x")
    print(f"pool's marginal cost per test beyond its own work: {marginal:.3f} s (goal <= 0.3 s)")
    print("markdown rows (docs/PERFORMANCE.md):")
    print("\n".join(markdown_rows(label, args, {"pool": pool, "per-test launch": fresh})))


if __name__ == "__main__":
    main()
