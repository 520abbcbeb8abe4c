"""Run a ``@pytest.mark.gpuperf_distributed`` test: build its task, send it to the ranks, judge what comes back."""

from __future__ import annotations

import pickle
import sys
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.distributed.tasks import RANK_FIXTURES, RankResult, RankTask, ThisDevice

if TYPE_CHECKING:
    from pytest_gpuperf.distributed.manager import PoolManager
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.settings import Settings


@dataclass(frozen=True)
class DistSpec:
    """Where one distributed test runs: its world size, device backend and timeout."""

    world_size: int
    backend: str
    timeout: float


class TaskError(ValueError):
    """A test whose body cannot be sent to another process (the message says why and what to change)."""


def task_for(item: pytest.Function, backend: str, settings: Settings | None, lockstep: bool = True) -> RankTask:
    """The picklable description of ``item``'s body: function by reference, other arguments by value.

    A method of a test class runs on a fresh instance of its class there, as pytest runs each test on its own
    instance (``setup_method``/``teardown_method`` around it; fixtures' side effects do not travel).

    ``settings``: the pytest process's measuring settings (None: smoke mode); ``lockstep``: the
    ``gpuperf`` handle measures in lockstep across ranks (False: exactly as in the pytest process).
    """
    argnames = item._fixtureinfo.argnames
    wants = tuple(name for name in RANK_FIXTURES if name in argnames)
    kwargs = {name: item.funcargs[name] for name in argnames if name not in RANK_FIXTURES}
    device = _device_of(item)
    for name, value in kwargs.items():
        try:
            pickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - any pickling failure is reported the same way
            if device is not None and value is device:
                kwargs[name] = ThisDevice()  # the test's own device (Vulkan): the running process's own there
                continue
            raise TaskError(
                f"{item.nodeid}: argument {name!r} ({type(value).__name__}) cannot be sent to another process: "
                f"{exc}. Such tests may take picklable fixtures and parameters only; build other objects in the body."
            ) from None
    marker = item.get_closest_marker("gpuperf")
    handle: GpuPerf | None = item.funcargs.get("gpuperf")  # type: ignore[assignment]
    judging = handle.judging if handle is not None and settings is not None else None  # its entries travel too
    return RankTask(
        node_id=item.nodeid,
        module_name=item.module.__name__,
        module_file=str(item.module.__file__),
        qualname=item.function.__qualname__,
        backend=backend,
        kwargs=kwargs,
        wants=wants,
        gpuperf_options=dict(marker.kwargs) if marker is not None else {},
        settings=settings,
        baseline_entries=judging.entries(handle.context) if judging is not None else {},
        baseline_fingerprint=judging.fingerprint(handle.context) if judging is not None else {},
        seed=zlib.crc32(item.nodeid.encode()) & 0x7FFFFFFF,
        sys_path=[p for p in sys.path if p],
        lockstep=lockstep,
        in_class=item.cls is not None,
        measure_instead=item.config.hook.pytest_gpuperf_rank_measure_instead(item=item) if judging else None,
    )


def _device_of(item: pytest.Function) -> Any:
    """The test's ``gpuperf.device`` (None without the handle)."""
    handle = item.funcargs.get("gpuperf")
    try:
        return handle.device if handle is not None else None
    except Exception:  # noqa: BLE001 - a handle without a device sends nothing in its place
        return None


def build_task(item: pytest.Function, backend: str) -> RankTask:
    """:func:`task_for` a distributed test; a body that cannot travel fails the test with the reason."""
    handle: GpuPerf | None = item.funcargs.get("gpuperf")  # type: ignore[assignment]
    settings = handle.judging.settings if handle is not None and handle.judging is not None else None
    try:
        return task_for(item, backend, settings)
    except TaskError as exc:
        if item.cls is not None:
            raise pytest.UsageError(f"{exc} (@pytest.mark.gpuperf_distributed)") from None
        pytest.fail(f"{exc} (@pytest.mark.gpuperf_distributed)", pytrace=False)


def attach_rank_output(item: pytest.Function, output: dict[int, tuple[str, str]]) -> None:
    """Each rank's stdout/stderr as report sections (shown for failing tests), also of ranks that died."""
    for rank in sorted(output):
        out, err = output[rank]
        if out:
            item.add_report_section("call", f"rank {rank} stdout", out)
        if err:
            item.add_report_section("call", f"rank {rank} stderr", err)


def conclude(
    item: pytest.Function,
    spec: DistSpec,
    results: dict[int, RankResult],
    failure: str | None,
    output: dict[int, tuple[str, str]] | None = None,
) -> None:
    """Fail with the evidence, skip when the ranks skipped, else judge the world's metrics.

    ``output``: each rank's (stdout, stderr), also of ranks that sent no result; default: the results' own.
    """
    from pytest_gpuperf.distributed.aggregate import aggregate
    from pytest_gpuperf.distributed.faults import skip_reason
    from pytest_gpuperf.distributed.judging import imbalance_tolerance, judge_world_metrics, mark_world, step_metrics

    handle: GpuPerf | None = item.funcargs.get("gpuperf")  # type: ignore[assignment]
    if output is None:
        output = {rank: (result.stdout, result.stderr) for rank, result in results.items()}
    attach_rank_output(item, output)
    mark_world(item, handle, spec.world_size)
    if failure:
        pytest.fail(failure, pytrace=False)
    reason = skip_reason(results)
    if reason is not None:
        pytest.skip(reason)
    per_rank = {rank: result.metrics for rank, result in results.items()}
    metrics = aggregate(per_rank, imbalance_tolerance(handle))
    judge_world_metrics(item, handle, spec.world_size, metrics + step_metrics(item, handle, spec.world_size, metrics))


def run_in_pool(item: pytest.Function, spec: DistSpec, manager: PoolManager) -> None:
    """Run ``item`` on a pool of ``spec.world_size`` ranks; fail it with the evidence on any fault."""
    from pytest_gpuperf.distributed.faults import describe_failure
    from pytest_gpuperf.distributed.pool import ERROR_GRACE_SECONDS, PoolStartError

    task = build_task(item, spec.backend)
    try:
        outcome = manager.run(task, spec.world_size, spec.timeout)
    except PoolStartError as exc:
        pytest.fail(f"{item.nodeid}: could not start {spec.world_size} rank(s) on {spec.backend}: {exc}", pytrace=False)
    failure = describe_failure(
        item.nodeid,
        spec.world_size,
        outcome.results,
        hung=outcome.hung,
        died=outcome.died,
        stacks=outcome.stacks,
        timeout=spec.timeout if outcome.timed_out else None,
        launcher_log=outcome.launcher_log,
        grace=ERROR_GRACE_SECONDS,
        output=outcome.output,
    )
    conclude(item, spec, outcome.results, failure, outcome.output)


def spec_for(item: pytest.Item, default_timeout: float) -> DistSpec:
    """Read ``@pytest.mark.gpuperf_distributed(world_size=..., timeout=..., backend=...)`` of ``item``."""
    from pytest_gpuperf.distributed.env import outer_launch, resolve_world_size

    marker = item.get_closest_marker("gpuperf_distributed")
    assert marker is not None
    kwargs: dict[str, Any] = dict(marker.kwargs)
    if marker.args:
        kwargs.setdefault("world_size", marker.args[0])
    unknown = set(kwargs) - {"world_size", "timeout", "backend"}
    if unknown:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.gpuperf_distributed got unknown argument(s) {sorted(unknown)}; "
            "known: world_size, timeout, backend"
        )
    callspec = getattr(item, "callspec", None)
    backend = (callspec.params.get("gpuperf_backend") if callspec else None) or kwargs.get("backend") or "cpu"
    try:
        launch = outer_launch()
        outer = launch.world_size if launch is not None else None
        world_size = resolve_world_size(kwargs.get("world_size", 2), str(backend), outer)
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.gpuperf_distributed: {exc}") from None
    timeout = float(kwargs.get("timeout") or default_timeout)
    return DistSpec(world_size, str(backend), timeout)
