"""Cost of running tests again in fresh worker processes (``pytest_gpuperf.distributed.replicate``).

    python benchmarks/bench_replicate.py [--tests 5] [--processes 3] [--device cpu|cuda]

Runs ``--tests`` small test bodies, each in ``--processes`` fresh worker processes, through the same
:class:`~pytest_gpuperf.distributed.replicate.ReplicaPool` that ``run_in_fresh_processes`` uses. Each
body does a fixed amount of torch work and reports its own seconds; the table shows the worker starts
(paid once per session, workers are reused across tests), their total start time, and the marginal
cost of one run beyond the body's own work (shipping the task, state reset, the result coming back).
The last line is a markdown table row for ``docs/PERFORMANCE.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def small_body(device: str = "cpu") -> None:
    """The replicated body: 20 matmuls of 256x256 on the device, synchronized."""
    import torch

    x = torch.randn(256, 256, device=device)
    for _ in range(20):
        x = torch.tanh(x @ x)
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    """Replicate the body and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()

    from pytest_gpuperf.distributed.pool import RankPool
    from pytest_gpuperf.distributed.replicate import ReplicaPool
    from pytest_gpuperf.distributed.tasks import RankTask

    here = Path(__file__).resolve()
    replicas = ReplicaPool()
    starts = 0.0
    original_start = RankPool.start

    def timed_start(self: RankPool, timeout: float = 300.0) -> None:
        nonlocal starts
        began = time.perf_counter()
        original_start(self, timeout)
        starts += time.perf_counter() - began

    RankPool.start = timed_start  # type: ignore[method-assign]
    own = 0.0
    runs = 0
    began = time.perf_counter()
    try:
        for index in range(args.tests):
            task = RankTask(
                node_id=f"bench::test_{index}",
                module_name=here.stem,
                module_file=str(here),
                qualname=small_body.__qualname__,
                backend=args.device,
                kwargs={"device": args.device},
                sys_path=[str(here.parent), str(ROOT)],
                lockstep=False,
            )
            for run in replicas.run(task, args.processes, timeout=300):
                assert run.ok, run.error
                own += run.seconds
                runs += 1
    finally:
        wall = time.perf_counter() - began
        replicas.close()
        RankPool.start = original_start  # type: ignore[method-assign]
    overhead = (wall - starts - own) / max(runs, 1)
    header = ("tests", 5), ("procs", 5), ("runs", 4), ("starts", 6), ("wall s", 7), ("start s", 7), ("own s", 6)
    print(" ".join(f"{name:>{width}}" for name, width in header), f"{'per run s':>9}")
    print(
        f"{args.tests:>5} {args.processes:>5} {runs:>4} {replicas.started:>6} {wall:>7.2f} {starts:>7.2f} "
        f"{own:>6.2f} {overhead:>9.3f}"
    )
    print(
        f"| {args.device} | {args.tests} | {args.processes} | {runs} | {replicas.started} | {wall:.2f} | "
        f"{starts:.2f} | {own:.2f} | {overhead:.3f} |"
    )


if __name__ == "__main__":
    main()
