"""The timing loop on this CPU: warm-up to steady state in fresh processes, the contention guard under load, budgets.

Prints one table per part:

1. ``x * 2`` on 64K floats (slow for its first calls of a process on small VMs) measured by ``measure_time``
   as the first thing in N fresh processes: judged time, warm-up calls and seconds, ``settled``;
2. a 1-thread matmul step measured alone and beside K busy-loop processes: judged time, retaken samples,
   contended fraction, CPU pressure and the ``contended`` flag;
3. slow and blocking steps under ``max_time=1``: wall seconds of the whole measurement, method, samples.

    python benchmarks/bench_timing_loop.py [--processes 4] [--busy 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time, torch
from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.timing import MeasureConfig, measure_time
x = torch.randn(65536)
r = measure_time(CpuBackend(), lambda: x * 2, MeasureConfig())
print(json.dumps({"us": r.typical * 1e6, "warmup_calls": r.warmup_calls, "warmup_s": r.warmup_seconds,
                  "settled": r.settled, "method": r.method}))
"""


def busy() -> None:
    """Spin forever (a neighbour's CPU-bound job)."""
    while True:
        pass


def fresh_processes(n: int) -> None:
    """Part 1: the first measurement of a fresh process."""
    print(f"\n1. x * 2 on 64K floats, first measurement of {n} fresh processes (default MeasureConfig)")
    print(f"{'process':>8} {'q20 us':>9} {'warm-up calls':>14} {'warm-up s':>10} {'settled':>8} {'method':>11}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    for index in range(n):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{index:>8} {row['us']:>9.2f} {row['warmup_calls']:>14} {row['warmup_s']:>10.3f} "
            f"{row['settled']!s:>8} {row['method']:>11}"
        )


def contention(busy_count: int) -> None:
    """Part 2: the contention guard alone and beside busy loops."""
    import torch

    from pytest_gpuperf.backends.cpu import CpuBackend
    from pytest_gpuperf.timing import MeasureConfig, measure_time

    a = torch.randn(128, 128)
    print(f"\n2. 128x128 matmul, 1 thread, alone and beside {busy_count} busy loops (max_time 2 s)")
    header = ("neighbours", "q20 us", "samples", "retaken", "contended %", "PSI avg10", "flag")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, (10, 9, 8, 8, 12, 10, 6), strict=True)))
    for neighbours in (0, busy_count):
        procs = [multiprocessing.Process(target=busy, daemon=True) for _ in range(neighbours)]
        for proc in procs:
            proc.start()
        time.sleep(0.5 if neighbours else 0.0)
        try:
            r = measure_time(CpuBackend(), lambda: a @ a, MeasureConfig())
        finally:
            for proc in procs:
                proc.terminate()
                proc.join()
        c = r.contention or {}
        print(
            f"{neighbours:>10} {r.typical * 1e6:>9.2f} {len(r.samples):>8} {c.get('retaken', 0):>8} "
            f"{100 * c.get('contended_fraction', 0.0):>12.1f} {c.get('cpu_pressure_avg10')!s:>10} {r.contended!s:>6}"
        )


def budgets() -> None:
    """Part 3: slow and blocking steps under a 1 s budget."""
    from pytest_gpuperf.backends.cpu import CpuBackend
    from pytest_gpuperf.timing import MeasureConfig, measure_time

    def spin(seconds: float):
        def step() -> None:
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                pass

        return step

    print("\n3. slow and blocking steps, max_time 1 s")
    print(f"{'step':>14} {'wall s':>7} {'method':>11} {'samples':>8} {'warm-up calls':>14} {'q20 s':>9}")
    for name, step in (("spin 0.3 s", spin(0.3)), ("sleep 0.2 s", lambda: time.sleep(0.2)), ("spin 2 s", spin(2.0))):
        started = time.perf_counter()
        r = measure_time(CpuBackend(), step, MeasureConfig(max_time=1.0))
        wall = time.perf_counter() - started
        print(f"{name:>14} {wall:>7.2f} {r.method:>11} {len(r.samples):>8} {r.warmup_calls:>14} {r.typical:>9.4f}")


def main() -> None:
    """Run the three parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--busy", type=int, default=2)
    args = parser.parse_args()
    fresh_processes(args.processes)
    contention(args.busy)
    budgets()


if __name__ == "__main__":
    main()
