"""pytest-xdist with one GPU per worker.

The controller decides which GPUs the workers share out (``gpuperf_worker_gpus``:
``auto`` = the GPUs in ``CUDA_VISIBLE_DEVICES``, else those ``nvidia-smi -L`` lists; a
comma-separated list; or ``off``) and passes them to the workers in the environment
variable :data:`ENV_GPUS` (workers inherit the controller's environment). Each worker
``gwN`` then sets ``CUDA_VISIBLE_DEVICES`` to GPU ``N mod len(gpus)`` in
``pytest_load_initial_conftests``, before conftests or test modules are imported and so
before torch can initialise CUDA.

Distributed perf tests (``@pytest.mark.gpuperf_distributed``, or using the ``gpuperf_torchrun``
fixture) need every GPU and would
collide with the single-GPU tests other workers run at the same time; under xdist they
are skipped with a reason saying to run them in their own invocation without ``-n``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping, MutableMapping

#: Controller -> workers: the comma-separated GPU indices/UUIDs workers are pinned to.
ENV_GPUS = "GPUPERF_XDIST_GPUS"
DISTRIBUTED_MARKER = "gpuperf_distributed"
#: Fixtures that start ranks of their own (through torchrun).
DISTRIBUTED_FIXTURES = ("gpuperf_torchrun",)
DISTRIBUTED_SKIP = (
    "distributed perf tests need every GPU and would collide with the single-GPU tests other pytest-xdist workers "
    "run; run them in their own invocation without -n: pytest --gpuperf -m gpuperf_distributed"
)


def is_distributed(closest_marker: Callable[[str], object], fixturenames: Iterable[str]) -> bool:
    """True for a test that starts several ranks: marked ``gpuperf_distributed`` or using ``gpuperf_torchrun``."""
    return closest_marker(DISTRIBUTED_MARKER) is not None or any(f in DISTRIBUTED_FIXTURES for f in fixturenames)


def worker_index(worker_id: str) -> int | None:
    """``gw3`` -> 3; None for anything else (the controller, or no xdist)."""
    if worker_id.startswith("gw") and worker_id[2:].isdigit():
        return int(worker_id[2:])
    return None


def detect_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """GPUs this machine lets us use: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``'s count."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(listed.stdout.splitlines()) if line.startswith("GPU ")]


def parse_gpu_setting(value: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``gpuperf_worker_gpus``: ``auto`` -> :func:`detect_gpus`; ``off`` -> []; ``0,2`` -> [``0``, ``2``]."""
    text = value.strip().lower()
    if text in ("", "auto"):
        return detect_gpus(env)
    if text in ("off", "none", "no"):
        return []
    return [g.strip() for g in value.split(",") if g.strip()]


def gpu_for_worker(worker_id: str, gpus: list[str]) -> str | None:
    """The GPU worker ``gwN`` is pinned to: ``gpus[N % len(gpus)]`` (None without GPUs or xdist)."""
    index = worker_index(worker_id)
    if index is None or not gpus:
        return None
    return gpus[index % len(gpus)]


def pin_worker(env: MutableMapping[str, str] | None = None) -> str | None:
    """In an xdist worker, set ``CUDA_VISIBLE_DEVICES`` from :data:`ENV_GPUS`; returns the GPU or None."""
    env = os.environ if env is None else env
    gpus = [g for g in env.get(ENV_GPUS, "").split(",") if g]
    gpu = gpu_for_worker(env.get("PYTEST_XDIST_WORKER", ""), gpus)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def cuda_already_initialised() -> bool:
    """True when torch is imported and has already created a CUDA context (pinning would come too late)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except (AttributeError, RuntimeError):
        return False


def sharing_warning(workers: int, gpus: list[str]) -> str | None:
    """A warning when more workers than GPUs run: tests sharing a GPU disturb each other's timings."""
    if gpus and workers > len(gpus):
        return (
            f"pytest-gpuperf: {workers} xdist workers share {len(gpus)} GPU(s) {','.join(gpus)}; tests on a shared "
            f"GPU disturb each other's timings. Use -n {len(gpus)} (one worker per GPU)."
        )
    return None
