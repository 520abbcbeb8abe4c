"""The environment of rank processes, outer launches, and whether a world size fits this machine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: Set in the environment of every process the distributed feature starts: NVLink
#: multicast (NVLS) is off, so collectives never depend on a fabric manager.
SAFE_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

#: Process-group backend per device backend.
DIST_BACKENDS: dict[str, str] = {"cpu": "gloo", "cuda": "nccl"}


def process_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) with :data:`SAFE_ENV` and ``extra`` applied.

    Variables of an outer launch (RANK, WORLD_SIZE ...) are dropped so that the
    ranks we start get torchrun's own.
    """
    env = dict(os.environ if base is None else base)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(SAFE_ENV)
    if extra:
        env.update(extra)
    return env


def torchrun_command(nproc_per_node: int, *target: str) -> list[str]:
    """``python -m torch.distributed.run`` on one node, N local ranks, no restarts, then ``target``.

    ``target`` is a script and its arguments, or ``-m module``; both the rank pool and the
    ``gpuperf_torchrun`` fixture start their ranks through this one launcher.
    """
    import sys

    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(nproc_per_node),
        "--max_restarts",
        "0",
        *target,
    ]


def apply_safe_env() -> None:
    """Put :data:`SAFE_ENV` into this process's environment (for in-place runs)."""
    os.environ.update(SAFE_ENV)


@dataclass(frozen=True)
class OuterLaunch:
    """The rank this pytest process was given by an outer torchrun or SLURM launch."""

    rank: int
    local_rank: int
    world_size: int
    source: str


def outer_launch(env: Mapping[str, str] | None = None) -> OuterLaunch | None:
    """The outer launch pytest runs under (torchrun's RANK/WORLD_SIZE, or SLURM), or None.

    Our own pool workers set ``GPUPERF_POOL_WORKER`` and are never taken for an outer launch.
    """
    env = os.environ if env is None else env
    if env.get("GPUPERF_POOL_WORKER"):
        return None
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        rank = int(env["RANK"])
        return OuterLaunch(rank, int(env.get("LOCAL_RANK", rank)), int(env["WORLD_SIZE"]), "torchrun")
    if env.get("SLURM_PROCID") is not None and env.get("SLURM_NTASKS") is not None:
        rank = int(env["SLURM_PROCID"])
        return OuterLaunch(rank, int(env.get("SLURM_LOCALID", rank)), int(env["SLURM_NTASKS"]), "slurm")
    return None


def world_size_problem(backend: str, world_size: int) -> str | None:
    """Why ``world_size`` ranks cannot run on ``backend`` here (a skip reason), or None."""
    if world_size < 1:
        return f"world_size must be at least 1, got {world_size}"
    if backend not in DIST_BACKENDS:
        return f"distributed tests run on {sorted(DIST_BACKENDS)}, not on backend {backend!r}"
    if backend == "cuda":
        import torch

        count = torch.cuda.device_count()
        if world_size > count:
            return f"world_size={world_size} needs {world_size} CUDA GPU(s) (one per rank); this machine has {count}"
    return None


def resolve_world_size(value: object, backend: str, outer: int | None = None) -> int:
    """A marker's ``world_size``: an int, or a mapping per backend (``{"cpu": 2, "cuda": "all"}``).

    ``"all"`` means the outer launch's world size when pytest runs under one (``outer``),
    else every visible GPU on CUDA (at least 1) and 2 ranks on the CPU.
    """
    if isinstance(value, Mapping):
        if backend not in value:
            raise ValueError(f"world_size mapping {dict(value)} has no entry for backend {backend!r}")
        value = value[backend]
    if value == "all":
        if outer is not None:
            return outer
        if backend == "cuda":
            import torch

            return max(1, torch.cuda.device_count())
        return 2
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"world_size must be an int, 'all' or a mapping per backend, got {value!r}")
    return value
