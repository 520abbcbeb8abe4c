"""pytest hooks of the xdist feature: one GPU per pytest-xdist worker; imported at start-up, so nothing heavy.

* the controller shares out the GPUs (``gpuperf_worker_gpus``) through the environment the
  workers inherit, and warns when more workers than GPUs would share one;
* each worker sets ``CUDA_VISIBLE_DEVICES`` in ``pytest_load_initial_conftests``, before
  conftests or test modules can import torch;
* distributed perf tests (they need every GPU) are skipped on workers, with the command to run them;
* a worker whose controller is gone (killed: SIGTERM, ``kill -9``) exits within a second, before it writes
  anything: a cancelled ``--gpuperf-update`` must not land, and no worker may outlive its run.
"""

from __future__ import annotations

import os
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
    from pytest_gpuperf.hookspecs import SummarySection

SHARER_NAME = "gpuperf-xdist-gpus"


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
        return
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 0:
        sharer = GpuSharer(config)
        config.pluginmanager.register(sharer, SHARER_NAME)
        sharer.share(workers)


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

    def pytest_unconfigure(self) -> None:
        """Take the GPU list out of the environment again."""
        if self._env_set:
            os.environ.pop(self._env_set, None)

    def pytest_gpuperf_summary_sections(self, config: pytest.Config, records: list[Any]) -> list[SummarySection]:
        """Which GPU each worker used, and a warning when workers shared one."""
        if not self.lines:
            return []
        from pytest_gpuperf.hookspecs import SummarySection

        return [SummarySection("gpuperf xdist", tuple((line, {}) for line in self.lines), sep="-", order=20)]
