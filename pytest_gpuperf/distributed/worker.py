"""A rank of the pool: ``python -m torch.distributed.run ... -m pytest_gpuperf.distributed.worker``.

Started by :class:`pytest_gpuperf.distributed.pool.RankPool` with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus:

* ``GPUPERF_POOL_ADDR`` (host:port) and ``GPUPERF_POOL_KEY`` (hex): where to report, and the key both
  sides prove they hold before any pickle is exchanged (:mod:`.channel`);
* ``GPUPERF_POOL_BACKEND``: ``cpu`` (gloo) or ``cuda`` (NCCL, one GPU per rank);
* ``GPUPERF_POOL_PARENT`` / ``GPUPERF_POOL_PARENT_START``: the pytest process id and start time; the rank
  exits when that process is gone, a zombie or replaced (and, through ``PR_SET_PDEATHSIG``, when its launcher dies);
* ``GPUPERF_POOL_DIR``: the pool's folder: ``rank<N>.out`` / ``rank<N>.err`` receive the rank's stdout and
  stderr (file descriptors 1 and 2, so C libraries' output and the last words before ``os._exit`` are kept),
  ``rank<N>.stacks`` all threads' stacks on SIGUSR1;
* ``GPUPERF_POOL_SOLO``: a single worker started directly (no torchrun, no process group), for
  :mod:`.replicate`;
* ``GPUPERF_POOL_PG_TIMEOUT``: the process group's collective timeout in seconds.

It joins the default process group once (unless solo), then runs test bodies until told to stop.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.distributed.tasks import RankInfo


def _watch_parent(parent: int, start_time: str) -> None:
    """Exit hard when the pytest process is gone (or a zombie), even if the main thread is stuck in a collective."""
    from pytest_gpuperf.procs.lifetime import process_alive

    while True:
        time.sleep(0.5)
        if not process_alive(parent, start_time):
            os._exit(3)


def _redirect_output(directory: Path, rank: int) -> None:
    """Send this process's stdout and stderr (the file descriptors) to ``rank<N>.out`` / ``rank<N>.err``."""
    for fd, suffix in ((1, "out"), (2, "err")):
        target = os.open(directory / f"rank{rank}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


def _guard_lifetime(directory: Path, rank: int, solo: bool) -> None:
    """Die with the launcher (a rank) and with the pytest process; dump all threads' stacks on SIGUSR1."""
    from pytest_gpuperf.procs.lifetime import die_with_parent

    if not solo:
        launcher = os.getppid()
        die_with_parent()
        if os.getppid() != launcher:  # the launcher died before the request took effect
            os._exit(3)
    parent = (int(os.environ["GPUPERF_POOL_PARENT"]), os.environ.get("GPUPERF_POOL_PARENT_START", ""))
    threading.Thread(target=_watch_parent, args=parent, daemon=True).start()
    stacks = open(directory / f"rank{rank}.stacks", "w")  # stays open for faulthandler
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)


def _join_group(backend_name: str, local_rank: int) -> None:
    """Join the default process group: NCCL with one GPU per rank on ``cuda``, else gloo."""
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=float(os.environ.get("GPUPERF_POOL_PG_TIMEOUT", "1800")))
    if backend_name == "cuda":
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo", timeout=timeout)


def _serve(conn: Connection, info: RankInfo, backend: Backend, solo: bool) -> None:
    """Run each task the pytest process sends (every rank at once, after a barrier) until ``stop`` or a dirty rank."""
    import torch.distributed as dist

    from pytest_gpuperf.distributed.channel import recv_message, send_message
    from pytest_gpuperf.distributed.rank_runner import cleanup_process_groups, run_task

    while True:
        try:
            message: tuple = recv_message(conn)  # type: ignore[assignment]
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        if not solo:
            dist.barrier()
        result = run_task(message[1], info, backend, capture=False)
        sys.stdout.flush()
        sys.stderr.flush()
        result.dirty = cleanup_process_groups(solo)
        send_message(conn, result)
        if result.dirty:
            return


def main() -> int:
    """Join the process group (unless solo), connect to the pytest process, serve tasks until ``stop``."""
    os.environ["GPUPERF_POOL_WORKER"] = "1"
    solo = os.environ.get("GPUPERF_POOL_SOLO") == "1"
    if solo:
        rank, local_rank, world_size = 0, 0, 1
    else:
        rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
        world_size = int(os.environ["WORLD_SIZE"])
    directory = Path(os.environ["GPUPERF_POOL_DIR"])
    _redirect_output(directory, rank)
    _guard_lifetime(directory, rank, solo)

    import torch.distributed as dist

    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.distributed.channel import connect, send_message
    from pytest_gpuperf.distributed.env import DIST_BACKENDS
    from pytest_gpuperf.distributed.tasks import RankInfo

    backend_name = os.environ.get("GPUPERF_POOL_BACKEND", "cpu")
    if not solo:  # one process measuring on its own has no process group
        _join_group(backend_name, local_rank)
    info = RankInfo(rank, local_rank, world_size, backend_name, DIST_BACKENDS.get(backend_name, ""))
    backend = get_backend(backend_name)
    conn = connect(os.environ["GPUPERF_POOL_ADDR"], bytes.fromhex(os.environ["GPUPERF_POOL_KEY"]))
    send_message(conn, {"rank": rank, "pid": os.getpid(), "local_rank": local_rank})
    _serve(conn, info, backend, solo)
    if dist.is_initialized():
        dist.destroy_process_group()
    conn.close()
    return 0


if __name__ == "__main__":
    from pytest_gpuperf.procs.exit import exit_now

    exit_now(main())
