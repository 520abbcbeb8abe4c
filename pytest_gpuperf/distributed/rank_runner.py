"""Run one test body inside a rank: reset state, import the function, give it ``gpuperf``, collect metrics.

Used by the pool worker (:mod:`.worker`) and by in-place runs under an outer
launch (:mod:`.inplace`). Metrics are measured with the core's own
:meth:`GpuPerf.measure` (in lockstep across ranks, see :mod:`.lockstep`) and collected,
not judged: judging happens in the pytest process (or on rank 0), against the
baseline of the whole world.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import io
import random
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.distributed.tasks import (
    STATUS_ERROR,
    STATUS_OK,
    STATUS_OOM,
    STATUS_SKIP,
    RankInfo,
    RankResult,
    RankTask,
    ThisDevice,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.judging.collecting import CollectingJudging

_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")


def rank_judging(task: RankTask) -> CollectingJudging | None:
    """The judging service of a rank: the task's settings and the entries the pytest process sent; collects
    metrics instead of judging them (the world is judged once). None in smoke mode."""
    if task.settings is None:
        return None
    from pytest_gpuperf.baselines.sources import FixedBaselines
    from pytest_gpuperf.judging.collecting import CollectingJudging

    return CollectingJudging(task.settings, FixedBaselines(task.baseline_entries, task.baseline_fingerprint))


def resolve_function(task: RankTask) -> Any:
    """Import the test function of ``task`` (by module name, else by file), then walk its qualname."""
    for entry in reversed(task.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module = sys.modules.get(task.module_name)
    if module is None or getattr(module, "__file__", None) != task.module_file:
        try:
            module = importlib.import_module(task.module_name)
        except ImportError:
            module = None
        if module is None or getattr(module, "__file__", None) != task.module_file:
            spec = importlib.util.spec_from_file_location(task.module_name, task.module_file)
            if spec is None or spec.loader is None:
                raise ImportError(f"{task.node_id}: cannot import {task.module_file} on this rank")
            module = importlib.util.module_from_spec(spec)
            sys.modules[task.module_name] = module
            spec.loader.exec_module(module)
    obj: Any = module
    *owners, name = task.qualname.split(".")
    for part in owners:
        obj = getattr(obj, part)
    if not task.in_class:
        return getattr(obj, name)
    return _method_of_fresh_instance(obj(), name)


def _method_of_fresh_instance(instance: Any, name: str) -> Any:
    """``instance.name`` wrapped in the class's ``setup_method``/``teardown_method``, as pytest runs it."""
    method = getattr(instance, name)
    setup, teardown = getattr(instance, "setup_method", None), getattr(instance, "teardown_method", None)
    if setup is None and teardown is None:
        return method

    def run(**kwargs: Any) -> Any:
        if setup is not None:
            setup(method)
        try:
            return method(**kwargs)
        finally:
            if teardown is not None:
                teardown(method)

    return run


def reset_state(seed: int, backend: str) -> None:
    """Before each test: same RNG seeds on every rank, fresh peak-memory statistics, garbage collected."""
    import torch

    gc.collect()
    random.seed(seed)
    torch.manual_seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed)
    if backend == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def cleanup_process_groups(solo: bool = False) -> str:
    """After each test: destroy process groups the test left behind; say if the default group is gone.

    ``solo``: a worker without a process group of its own; any group a test made is destroyed.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if solo:
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()
        return ""
    if not dist.is_initialized():
        return "the test destroyed the default process group"
    default = c10d._get_default_group()
    for group in list(c10d._world.pg_map):
        if group is not default:
            dist.destroy_process_group(group)
    gc.collect()
    return ""


def memory_numbers(backend: str, local_rank: int) -> dict[str, float]:
    """This rank's peak memory numbers: the CUDA allocator's peaks, or the process's peak RSS on CPU."""
    import resource

    numbers: dict[str, float] = {"peak_rss": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)}
    if backend == "cuda":
        import torch

        if torch.cuda.is_available():
            numbers["max_memory_allocated"] = float(torch.cuda.max_memory_allocated(local_rank))
            numbers["max_memory_reserved"] = float(torch.cuda.max_memory_reserved(local_rank))
            numbers["memory_allocated"] = float(torch.cuda.memory_allocated(local_rank))
            numbers["total_memory"] = float(torch.cuda.get_device_properties(local_rank).total_memory)
    return numbers


def is_oom(exc: BaseException) -> bool:
    """True for torch's OutOfMemoryError and for allocator failures (CPU ``can't allocate memory``)."""
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, (MemoryError, RuntimeError)) and any(t in str(exc).lower() for t in _OOM_TEXT)


def run_task(task: RankTask, info: RankInfo, backend: Backend, capture: bool = True) -> RankResult:
    """Run ``task``'s body on this rank and return its metrics or its failure (never raises).

    ``capture``: keep the body's stdout/stderr in the result; a pool worker passes False (its
    output goes to files the pytest process reads, which survive the rank's death).
    """
    import pytest

    from pytest_gpuperf.context import build_context
    from pytest_gpuperf.distributed.lockstep import lockstep_handle
    from pytest_gpuperf.fixture import GpuPerf

    started = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    collector = rank_judging(task)
    result = RankResult(rank=info.rank, status=STATUS_OK)
    try:
        reset_state(task.seed, task.backend)
        func = resolve_function(task)
        kwargs = {k: backend.device() if isinstance(v, ThisDevice) else v for k, v in task.kwargs.items()}
        if "gpuperf" in task.wants:
            context = build_context(task.node_id, backend, task.gpuperf_options, info.world_size)
            instead = task.measure_instead  # a feature's stand-in for measuring (the ncu child's window), or None
            if task.lockstep:
                kwargs["gpuperf"] = lockstep_handle(context, collector, instead)
            else:
                kwargs["gpuperf"] = GpuPerf(context, collector, instead=instead)
        if "gpuperf_rank" in task.wants:
            kwargs["gpuperf_rank"] = info
        if "gpuperf_backend" in task.wants:
            kwargs["gpuperf_backend"] = backend
        if "gpuperf_device" in task.wants:
            kwargs["gpuperf_device"] = backend.device()  # this rank's (cuda:<local_rank>), not the pytest process's
        if capture:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                func(**kwargs)
        else:
            func(**kwargs)
    except pytest.skip.Exception as exc:
        result.status, result.traceback = STATUS_SKIP, str(exc.msg)
    except (Exception, pytest.fail.Exception) as exc:  # noqa: BLE001 - a rank reports every failure
        result.status = STATUS_OOM if is_oom(exc) else STATUS_ERROR
        result.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        result.memory = memory_numbers(task.backend, info.local_rank)
    result.seconds = time.perf_counter() - started
    result.metrics = list(collector.metrics) if collector is not None else []
    result.stdout, result.stderr = out.getvalue(), err.getvalue()
    return result
