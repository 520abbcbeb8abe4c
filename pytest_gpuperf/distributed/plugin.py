"""pytest hooks and fixtures of the distributed feature; imported at start-up, so nothing heavy at module level.

* ``@pytest.mark.gpuperf_distributed(world_size=2, timeout=None, backend=None)``: the body
  runs on every rank (reused rank pool, or in place under an outer launch);
* ``gpuperf_rank``: this rank's :class:`~pytest_gpuperf.distributed.tasks.RankInfo` inside such a body;
* ``gpuperf_torchrun``: run a script on N ranks through ``torch.distributed.run`` and judge what it prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import REPLICAS_KEY, WORLD_SIZE_KEY
from pytest_gpuperf.settings import add_options, get_option

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.distributed.manager import PoolManager
    from pytest_gpuperf.distributed.torchrun import TorchrunRunner
    from pytest_gpuperf.hookspecs import SummarySection

OPTIONS: list[tuple[Any, ...]] = [
    (
        "gpuperf_dist_timeout",
        "float",
        300.0,
        "seconds a distributed test may run before its ranks' stacks dump",
        {"above": 0, "section": "timeouts"},
    ),
    (
        "gpuperf_dist_start_timeout",
        "float",
        300.0,
        "seconds to wait for a rank pool to start",
        {"above": 0, "section": "timeouts"},
    ),
    (
        "gpuperf_no_dist_pool",
        "bool",
        False,
        "start fresh ranks for every distributed test instead of reusing a pool",
        {"aliases": ("--gpuperf-dist-no-pool",)},
    ),
]
MARKER = (
    "gpuperf_distributed(world_size=2, timeout=None, backend=None): run the test body on world_size ranks "
    "(gloo on CPU, NCCL on CUDA, one GPU per rank) through torchrun's launcher; world_size may be a mapping per "
    "backend ({'cpu': 2, 'cuda': 'all'}); per-rank metrics are judged as rank<N>.<metric>, plus the slowest rank's "
    "time/throughput and the imbalance between ranks"
)
MANAGER_KEY = pytest.StashKey["PoolManager"]()
#: On a test item: where its distributed body runs (set in setup, before its fixtures).
SPEC_KEY = pytest.StashKey["DistSpec"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the distributed feature's ini keys."""
    add_options(parser, OPTIONS, "distributed")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``gpuperf_distributed`` marker."""
    config.addinivalue_line("markers", MARKER)


def _manager(config: pytest.Config) -> PoolManager:
    from pytest_gpuperf.distributed.manager import PoolManager

    manager = config.stash.get(MANAGER_KEY, None)
    if manager is None:
        manager = PoolManager(
            start_timeout=get_option(config, "gpuperf_dist_start_timeout"),
            reuse=not get_option(config, "gpuperf_no_dist_pool"),
        )
        config.stash[MANAGER_KEY] = manager
    return manager


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, with the reason, a distributed test whose world does not fit this machine (never hang)."""
    if item.get_closest_marker("gpuperf_distributed") is None or item.get_closest_marker("skip") is not None:
        return  # not distributed, or already skipped with its own reason (backend absent)
    from pytest_gpuperf.distributed.env import world_size_problem
    from pytest_gpuperf.distributed.runner import spec_for

    spec = spec_for(item, get_option(item.config, "gpuperf_dist_timeout"))
    problem = world_size_problem(spec.backend, spec.world_size)
    if problem is not None:
        pytest.skip(problem)
    item.stash[SPEC_KEY] = spec
    item.stash[WORLD_SIZE_KEY] = spec.world_size  # the gpuperf fixture judges it as this world


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a ``gpuperf_distributed`` test's body on its ranks instead of in this process."""
    spec = pyfuncitem.stash.get(SPEC_KEY, None)
    if spec is None:
        return None
    from pytest_gpuperf.distributed.env import outer_launch

    launch = outer_launch()
    if launch is not None:
        from pytest_gpuperf.distributed.inplace import run_in_place

        run_in_place(pyfuncitem, spec, launch)
    else:
        from pytest_gpuperf.distributed.runner import run_in_pool

        run_in_pool(pyfuncitem, spec, _manager(pyfuncitem.config))
    return True


@pytest.fixture
def gpuperf_rank(request: pytest.FixtureRequest) -> Any:
    """This rank's ``RankInfo`` (rank, local_rank, world_size, backend, dist_backend, device) in a distributed test.

    The body of a ``@pytest.mark.gpuperf_distributed`` test runs on every rank with the
    default process group already joined; in the pytest process this fixture only
    checks that the test carries the marker.
    """
    spec = request.node.stash.get(SPEC_KEY, None)
    if spec is None:
        raise pytest.UsageError(
            f"{request.node.nodeid}: gpuperf_rank is only available in tests marked "
            "@pytest.mark.gpuperf_distributed(world_size=N)"
        )
    from pytest_gpuperf.distributed.env import DIST_BACKENDS
    from pytest_gpuperf.distributed.tasks import RankInfo

    return RankInfo(-1, -1, spec.world_size, spec.backend, DIST_BACKENDS[spec.backend])


@pytest.fixture
def gpuperf_torchrun(request: pytest.FixtureRequest, gpuperf_backend: Backend) -> TorchrunRunner:
    """Run a script on N ranks: ``gpuperf_torchrun.run("perf_tests/train_fsdp.py", nproc_per_node=2)``.

    Launches ``python -m torch.distributed.run --standalone --nproc_per_node N`` (gloo on
    CPU, NCCL on CUDA: the script reads ``GPUPERF_BACKEND``), fails the test on a
    non-zero exit or a timeout with the output, and judges the numbers the script
    printed on ``GPUPERF {"rank": ...}`` lines (or training-log ``Peak VRAM/GPU`` lines)
    against the baselines of an N-rank world.
    """
    from pytest_gpuperf.distributed.torchrun import TorchrunRunner

    handle = None
    if "gpuperf" in request.fixturenames:
        handle = request.getfixturevalue("gpuperf")
    timeout = get_option(request.config, "gpuperf_dist_timeout")
    return TorchrunRunner(request.node, handle, gpuperf_backend.name, timeout)


def _close_all(config: pytest.Config, graceful: bool) -> None:
    """Stop the rank pool and the replica workers of this session, if any."""
    for key in (MANAGER_KEY, REPLICAS_KEY):
        owner = config.stash.get(key, None)  # type: ignore[call-overload]
        if owner is not None:
            owner.close(graceful=graceful)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop every rank (at once after Ctrl-C)."""
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    if interrupted and _uses_workers(session.config):
        from pytest_gpuperf.distributed.interrupt import arm_second_interrupt

        arm_second_interrupt(session.config, lambda: _close_all(session.config, graceful=False))
    _close_all(session.config, graceful=not interrupted)


def pytest_gpuperf_run_in_fresh_processes(item: pytest.Item, processes: int) -> list[list[Any]] | None:
    """Run ``item`` again in fresh worker processes (replica pool); each successful run's metrics."""
    from pytest_gpuperf.distributed.replicate import last_line, run_in_fresh_processes

    runs = run_in_fresh_processes(item, processes)  # type: ignore[arg-type]
    done = [run.metrics for run in runs if run.ok]
    if not done and runs:
        raise RuntimeError(f"no fresh process finished the test ({runs[0].status}: {last_line(runs[0].error)})")
    return done


def pytest_gpuperf_write_baselines(config: pytest.Config) -> bool | None:
    """On ranks other than 0 of an outer launch, write no baselines (rank 0 writes the world's)."""
    from pytest_gpuperf.distributed.env import outer_launch

    launch = outer_launch()
    return False if launch is not None and launch.rank != 0 else None


def _uses_workers(config: pytest.Config) -> bool:
    return config.stash.get(MANAGER_KEY, None) is not None or config.stash.get(REPLICAS_KEY, None) is not None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Last resort: no rank process outlives the session; the second-Ctrl-C handler is removed."""
    _close_all(config, graceful=False)
    from pytest_gpuperf.distributed.interrupt import disarm_second_interrupt

    disarm_second_interrupt(config)


def pytest_gpuperf_summary_sections(config: pytest.Config, records: list[Any]) -> list[SummarySection] | None:
    """Lines on the rank pool (starts, rebuilds after faults, tests run) and the replica workers."""
    lines: list[tuple[str, dict[str, bool]]] = []
    manager = config.stash.get(MANAGER_KEY, None)
    if manager is not None and manager.stats.started:
        stats = manager.stats
        lines.append(
            (
                f"gpuperf distributed: {stats.tests} test(s) on {stats.started} rank-pool start(s) "
                f"({stats.rebuilt_after_fault} rebuilt after a fault), {stats.start_seconds:.1f} s starting ranks",
                {},
            )
        )
    replicas = config.stash.get(REPLICAS_KEY, None)
    if replicas is not None and replicas.runs:
        # what the run cost: -v only; a run that did not finish is said at any verbosity
        if int(getattr(config.option, "verbose", 0) or 0) > 0:
            runs = f"{replicas.runs} run(s) in fresh processes on {replicas.started} worker start(s)"
            lines.append((f"gpuperf replicas: {runs}", {}))
        if replicas.failures:
            lines.append(
                (
                    f"gpuperf replicas: {len(replicas.failures)} run(s) did not finish; their tests were judged or "
                    f"recorded without them. First: {replicas.failures[0]}",
                    {"yellow": True},
                )
            )
    if not lines:
        return None
    from pytest_gpuperf.hookspecs import SummarySection

    return [SummarySection("", tuple(lines), order=40)]
