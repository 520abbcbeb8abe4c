"""pytest hooks of the xdist feature: one GPU per pytest-xdist worker; imported at start-up, so nothing heavy.

* the controller shares out the GPUs (``gpuperf_worker_gpus``) through the environment the
  workers inherit, and warns when more workers than GPUs would share one;
* each worker sets ``CUDA_VISIBLE_DEVICES`` in ``pytest_load_initial_conftests``, before
  conftests or test modules can import torch;
* distributed perf tests (they need every GPU) are skipped on workers, with the command to run them;
* on the host CPU the workers would time on the same cores: with more than one worker, each times its steps (and
  its fresh processes theirs) under the run's CPU lock (:mod:`pytest_gpuperf.procs.cpu_lock`), one at a time, and
  the summary says so once.
* a worker whose controller is gone (killed: SIGTERM, ``kill -9``) exits within a second, before it writes
  anything: a cancelled ``--gpuperf-update`` must not land, and no worker may outlive its run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.settings import add_options, get_option

OPTIONS: list[tuple[Any, ...]] = [
    (
        "gpuperf_worker_gpus",
        "str",
        "auto",
        "GPUs shared out to pytest-xdist workers, one per worker: auto "
        "(CUDA_VISIBLE_DEVICES or nvidia-smi), a list like 0,1,2,3, or off",
        {"metavar": "auto|off|LIST"},
    ),
]
if TYPE_CHECKING:
    from pytest_gpuperf.hookspecs import ReportSection, SummarySection

SHARER_NAME = "gpuperf-xdist-gpus"
#: The call-report property of a test that timed under the run's CPU lock (its value: how many workers share it).
SERIALISED_PROPERTY = "gpuperf_cpu_serialised"
_LOCK_USES = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ini key ``gpuperf_worker_gpus``."""
    add_options(parser, OPTIONS, "distributed")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """In a pytest-xdist worker, pin CUDA_VISIBLE_DEVICES before conftests and test modules import torch."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # not an xdist worker: nothing to pin, and no import on every plain run
    from pytest_gpuperf.workers.gpus import ENV_GPUS, pin_worker

    if os.environ.get(ENV_GPUS):
        pin_worker()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--gpuperf``: a worker checks its pin came in time; the controller shares the GPUs out."""
    if config.stash.get(SESSION_KEY, None) is None:
        return
    if _is_worker(config):
        from pytest_gpuperf.workers.gpus import cuda_already_initialised, pin_worker

        watch_controller()
        gpu = pin_worker()
        if gpu is not None and cuda_already_initialised():
            raise pytest.UsageError(
                f"pytest-gpuperf: xdist worker {os.environ.get('PYTEST_XDIST_WORKER')} should run on GPU {gpu}, "
                "but CUDA was initialised before pytest-gpuperf could set CUDA_VISIBLE_DEVICES (a conftest or plugin "
                "touched torch.cuda at import); move that CUDA call into a fixture"
            )
        _configure_cpu_lock(config)
        return
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 0:
        sharer = GpuSharer(config)
        config.pluginmanager.register(sharer, SHARER_NAME)
        sharer.share(workers)


def _configure_cpu_lock(config: pytest.Config) -> None:
    """A worker of a run with more than one: host-CPU timing under the run's lock (:mod:`.procs.cpu_lock`)."""
    from pytest_gpuperf.procs import cpu_lock

    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    count = int(workerinput.get("workercount") or os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if count > 1:
        cpu_lock.configure(cpu_lock.lock_path(str(workerinput.get("testrunuid", ""))), count)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Note the CPU lock's uses before the test, to tell whether the test timed under it."""
    from pytest_gpuperf.procs.cpu_lock import active

    lock = active()
    if lock is not None:
        item.stash[_LOCK_USES] = lock.uses


def _timed_under_lock(item: pytest.Item) -> bool:
    from pytest_gpuperf.procs.cpu_lock import active

    lock = active()
    return lock is not None and lock.uses > item.stash.get(_LOCK_USES, lock.uses)


def pytest_gpuperf_report_sections(item: pytest.Item) -> list[ReportSection] | None:
    """A property on the call report of a test that timed under the CPU lock (read by the controller's summary)."""
    if not _timed_under_lock(item):
        return None
    from pytest_gpuperf.hookspecs import ReportSection
    from pytest_gpuperf.procs.cpu_lock import workers

    return [ReportSection("workers", properties=((SERIALISED_PROPERTY, str(workers())),), junit=False)]
#: Seconds between two looks at the controller from an xdist worker.
CONTROLLER_POLL = 0.25


def watch_controller(poll: float = CONTROLLER_POLL) -> None:
    """Exit this xdist worker at once when its controller (the process that started it) is gone.

    A worker used to outlive a killed controller by 5-20 s, finish its tests and write the baselines of an update
    the user had cancelled. A daemon thread compares the parent with the one at start (a dead parent reparents
    the worker); the worker then leaves with ``os._exit`` (its guarded children follow it, ``procs.guard``).
    """
    import threading
    import time

    from pytest_gpuperf.procs.lifetime import process_alive, process_start_time

    parent = os.getppid()
    started = process_start_time(parent)

    def watch() -> None:
        while os.getppid() == parent and process_alive(parent, started):
            time.sleep(poll)
        os._exit(int(pytest.ExitCode.INTERRUPTED))

    threading.Thread(target=watch, name="gpuperf-controller-watch", daemon=True).start()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under ``--gpuperf``, skip distributed perf tests (they need every GPU).

    Distributed means marked ``gpuperf_distributed`` or using the ``gpuperf_torchrun`` fixture.
    """
    if not _is_worker(config) or config.stash.get(SESSION_KEY, None) is None:
        return
    from pytest_gpuperf.workers.gpus import DISTRIBUTED_SKIP, is_distributed

    for item in items:
        if is_distributed(item.get_closest_marker, getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.skip(reason=DISTRIBUTED_SKIP))


class GpuSharer:
    """The controller's side: which GPUs the workers take, said once in the terminal summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.lines: list[str] = []
        self._env_set: str | None = None
        self._lock_dir: str | None = None

    def share(self, workers: int) -> None:
        """Tell the workers (through the environment they inherit) which GPUs to take, one each."""
        from pytest_gpuperf.workers.gpus import ENV_GPUS, parse_gpu_setting, sharing_warning

        if ENV_GPUS in os.environ:
            gpus = [g for g in os.environ[ENV_GPUS].split(",") if g]
        else:
            gpus = parse_gpu_setting(get_option(self.config, "gpuperf_worker_gpus"))
            if gpus:
                os.environ[ENV_GPUS] = ",".join(gpus)
                self._env_set = ENV_GPUS
        if gpus:
            self.lines.append(
                f"xdist: {workers} worker(s), GPUs {','.join(gpus)} (worker gwN uses GPU N mod {len(gpus)})"
            )
        warning = sharing_warning(workers, gpus)
        if warning:
            self.lines.append(warning)
        from pytest_gpuperf.procs.cpu_lock import ENV_DIR
        from pytest_gpuperf.procs.folders import make_pool_dir

        if workers > 1 and ENV_DIR not in os.environ:  # the folder of the workers' CPU lock, removed at the end
            self._lock_dir = str(make_pool_dir("cpu-lock"))
            os.environ[ENV_DIR] = self._lock_dir

    def pytest_unconfigure(self) -> None:
        """Take the GPU list and the CPU lock's folder out of the environment again; remove the folder."""
        if self._env_set:
            os.environ.pop(self._env_set, None)
        if self._lock_dir:
            from pytest_gpuperf.procs.cpu_lock import ENV_DIR
            from pytest_gpuperf.procs.folders import remove_pool_dir

            os.environ.pop(ENV_DIR, None)
            remove_pool_dir(Path(self._lock_dir))

    def pytest_gpuperf_summary_sections(self, config: pytest.Config, records: list[Any]) -> list[SummarySection]:
        """Which GPU each worker used, a warning when workers shared one, and that CPU timing was serialised."""
        serialised = [v for r in records for k, v in getattr(r, "properties", ()) if k == SERIALISED_PROPERTY]
        lines = list(self.lines)
        if serialised:
            lines.append(
                f"CPU timing serialised across {max(int(v) for v in serialised)} xdist workers (they share the host's "
                "cores: one times a step at a time, the others wait)"
            )
        if not lines:
            return []
        from pytest_gpuperf.hookspecs import SummarySection

        return [SummarySection("gpuperf xdist", tuple((line, {}) for line in lines), sep="-", order=20)]
