"""Rank pool vs one launch per test: 10 small FSDP2 tests at world size 2 on CPU (gloo).

    python benchmarks/bench_rank_pool.py [--tests 10] [--world-size 2]

Both modes use the same path a ``@pytest.mark.gpuperf_distributed`` test takes
(:class:`pytest_gpuperf.distributed.manager.PoolManager`: ``python -m
torch.distributed.run`` + the pool worker); "per-test launch" starts fresh ranks for
every test (``--gpuperf-dist-no-pool``), "pool" starts them once. Each test builds
a MiniLLM (CPU sizes), shards it with ``fully_shard`` per block and at the root, and
runs 3 training steps. "own work" is the slowest rank's time inside the test body;
the marginal cost per test is (wall time after the pool is up - own work) / tests.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fsdp2_training_test(gpuperf_rank) -> None:  # type: ignore[no-untyped-def]
    """The benchmarked test body: shard a CPU-sized MiniLLM with FSDP2 and train 3 steps."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh

    from perf_tests.models import CPU_CONFIG, MiniLLM, fully_shard_minillm, make_batch

    mesh = init_device_mesh("cpu", (gpuperf_rank.world_size,))
    model = fully_shard_minillm(MiniLLM(CPU_CONFIG), mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(CPU_CONFIG, torch.device("cpu"), seed=gpuperf_rank.rank)
    for _ in range(3):
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert torch.isfinite(loss)


def run_mode(reuse: bool, tests: int, world_size: int) -> dict[str, float]:
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
            backend="cpu",
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


def main() -> None:
    """Print one table row per mode, then the ratio and the pool's marginal cost per test."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    pool = run_mode(True, args.tests, args.world_size)
    fresh = run_mode(False, args.tests, args.world_size)
    print(f"{args.tests} FSDP2 tests, world size {args.world_size}, CPU (gloo)")
    print(f"{'mode':<18}{'starts':>7}{'wall s':>9}{'starting s':>12}{'own work s':>12}{'overhead/test s':>17}")
    for name, row in (("pool", pool), ("per-test launch", fresh)):
        overhead = (row["wall"] - row["own"]) / args.tests
        print(
            f"{name:<18}{row['starts']:>7.0f}{row['wall']:>9.2f}{row['start']:>12.2f}{row['own']:>12.2f}{overhead:>17.3f}"
        )
    marginal = (pool["wall"] - pool["start"] - pool["own"]) / args.tests
    print(f"speed-up of the pool: {fresh['wall'] / pool['wall']:.2f}x")
    print(f"pool's marginal cost per test beyond its own work: {marginal:.3f} s (goal <= 0.3 s)")


if __name__ == "__main__":
    main()
