"""Multi-node: when pytest itself runs under an outer ``torchrun`` or SLURM launch, run the body in place.

Every pytest process is one rank; the body runs here, the ranks' results are
exchanged with ``all_gather_object`` (so every rank can fail with the evidence),
and only rank 0 judges and writes baselines.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.distributed.env import DIST_BACKENDS, OuterLaunch, apply_safe_env

if TYPE_CHECKING:
    from pytest_gpuperf.distributed.runner import DistSpec


def ensure_process_group(launch: OuterLaunch, backend: str, timeout: float) -> None:
    """Join the outer launch's default process group once (env:// rendezvous: MASTER_ADDR/MASTER_PORT)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    apply_safe_env()
    os.environ.setdefault("RANK", str(launch.rank))
    os.environ.setdefault("WORLD_SIZE", str(launch.world_size))
    os.environ.setdefault("LOCAL_RANK", str(launch.local_rank))
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        raise pytest.UsageError(
            f"pytest runs as rank {launch.rank} of a {launch.source} launch but MASTER_ADDR/MASTER_PORT are not set; "
            "export them (the first node's address and a free port) before starting pytest on every rank"
        )
    span = timedelta(seconds=timeout)
    if backend == "cuda":
        torch.cuda.set_device(launch.local_rank)
        dist.init_process_group("nccl", timeout=span, device_id=torch.device("cuda", launch.local_rank))
    else:
        dist.init_process_group(DIST_BACKENDS[backend], timeout=span)


def run_in_place(item: pytest.Function, spec: DistSpec, launch: OuterLaunch) -> None:
    """Run ``item``'s body on this rank of the outer launch; rank 0 judges the world's metrics."""
    import torch.distributed as dist

    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.distributed.faults import describe_failure
    from pytest_gpuperf.distributed.rank_runner import run_task
    from pytest_gpuperf.distributed.runner import build_task, conclude
    from pytest_gpuperf.distributed.tasks import RankInfo

    if spec.world_size != launch.world_size:
        pytest.skip(
            f"needs world_size={spec.world_size}, but pytest runs under a {launch.source} launch of "
            f"{launch.world_size} ranks (distributed tests run in place on the ranks given)"
        )
    ensure_process_group(launch, spec.backend, spec.timeout)
    task = build_task(item, spec.backend)
    info = RankInfo(launch.rank, launch.local_rank, launch.world_size, spec.backend, DIST_BACKENDS[spec.backend])
    result = run_task(task, info, get_backend(spec.backend))
    gathered: list[object] = [None] * launch.world_size
    dist.all_gather_object(gathered, result)
    results = {r.rank: r for r in gathered if r is not None}  # type: ignore[attr-defined]
    failure = describe_failure(item.nodeid, spec.world_size, results)
    if launch.rank != 0:
        results = {launch.rank: result}
        for r in results.values():
            r.metrics = []  # only rank 0 judges
    conclude(item, spec, results, failure)
