"""A rank of the pool: ``python -m torch.distributed.run ... -m pytest_gpuperf.distributed.worker``.

Started by :class:`pytest_gpuperf.distributed.pool.RankPool` with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus:

* ``GPUPERF_POOL_ADDR`` (host:port) and ``GPUPERF_POOL_KEY`` (hex): where to report, and the key both
  sides prove they hold before any pickle is exchanged (:mod:`.channel`);
* ``GPUPERF_POOL_BACKEND``: ``cpu`` (gloo) or ``cuda`` (NCCL, one GPU per rank);
* ``GPUPERF_POOL_PARENT``: the pytest process id; the rank exits when it disappears;
* ``GPUPERF_POOL_DIR``: where ``rank<N>.stacks`` receives all threads' stacks on SIGUSR1;
* ``GPUPERF_POOL_PG_TIMEOUT``: the process group's collective timeout in seconds.

It joins the default process group once, then runs test bodies until told to stop.
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


def _watch_parent(parent: int) -> None:
    """Exit hard when the pytest process is gone, even if the main thread is stuck in a collective."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            os._exit(3)
        except PermissionError:
            pass


def main() -> int:
    """Join the process group, connect to the pytest process, serve tasks until ``stop``."""
    os.environ["GPUPERF_POOL_WORKER"] = "1"
    rank, local_rank, world_size = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    backend_name = os.environ.get("GPUPERF_POOL_BACKEND", "cpu")
    threading.Thread(target=_watch_parent, args=(int(os.environ["GPUPERF_POOL_PARENT"]),), daemon=True).start()
    stacks = open(Path(os.environ["GPUPERF_POOL_DIR"]) / f"rank{rank}.stacks", "w")  # stays open for faulthandler
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)

    import torch
    import torch.distributed as dist

    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.distributed.channel import connect
    from pytest_gpuperf.distributed.env import DIST_BACKENDS
    from pytest_gpuperf.distributed.rank_runner import cleanup_process_groups, run_task
    from pytest_gpuperf.distributed.tasks import RankInfo

    timeout = timedelta(seconds=float(os.environ.get("GPUPERF_POOL_PG_TIMEOUT", "1800")))
    if backend_name == "cuda":
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    info = RankInfo(rank, local_rank, world_size, backend_name, DIST_BACKENDS[backend_name])
    backend = get_backend(backend_name)
    conn = connect(os.environ["GPUPERF_POOL_ADDR"], bytes.fromhex(os.environ["GPUPERF_POOL_KEY"]))
    conn.send({"rank": rank, "pid": os.getpid(), "local_rank": local_rank})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "stop":
            break
        task = message[1]
        dist.barrier()
        result = run_task(task, info, backend)
        result.dirty = cleanup_process_groups()
        conn.send(result)
        if result.dirty:
            break
    if dist.is_initialized():
        dist.destroy_process_group()
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
