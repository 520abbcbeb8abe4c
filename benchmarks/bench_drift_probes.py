"""Do the drift probes track this machine's noise? Spread of step times with and without probe normalization.

Runs the plugin's own sampling (``measure.block_timer`` clocks, ``reference.build_probes`` probes) for a few CPU
workloads, ``--rounds`` times a few seconds apart; in each round it takes 30 samples per workload with every
probe timed right after each sample. Prints, per workload, the spread (max / min over rounds) of the 20th
percentile of the raw step times and of step / probe-quantile for each probe, for the wall clock and the thread
CPU clock, with 1 or 2 torch threads.

    python benchmarks/bench_drift_probes.py --threads 1 --rounds 8
"""

from __future__ import annotations

import argparse
import time

import torch

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.measure import MeasureConfig, _calibrate, block_timer, quantile
from pytest_gpuperf.reference import build_probes

Q = 0.2


def workloads() -> dict:
    """matmul (compute, preallocated), add (memory, preallocated), add with a fresh output, a small MLP step."""
    gen = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(192, 192, generator=gen) for _ in range(3))
    x, y, z = (torch.randn(1 << 20, generator=gen) for _ in range(3))
    layer = torch.nn.Linear(256, 512)
    inputs = torch.randn(64, 256, generator=gen)
    return {
        "matmul 192": lambda: torch.mm(a, b, out=c),
        "add 2^20": lambda: torch.add(x, y, out=z),
        "add 2^20 alloc": lambda: x + y,
        "mlp": lambda: layer(inputs).sum().backward(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--pause", type=float, default=3.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = CpuBackend()
    probes = build_probes(backend)
    clocks = {
        "wall": block_timer(backend, MeasureConfig(cpu_clock="wall"))[0],
        "thread": block_timer(backend, MeasureConfig(cpu_clock="thread"))[0],
    }
    stats: dict = {}
    for _ in range(args.rounds):
        for clock_name, timer in clocks.items():
            for name, fn in workloads().items():
                iters, _ = _calibrate(lambda n, fn=fn, timer=timer: timer(fn, n), 0.002)
                ref_iters = {
                    p: _calibrate(lambda n, p=p, timer=timer: timer(probes[p].fn, n), 0.001)[0] for p in probes
                }
                samples, refs = [], {p: [] for p in probes}
                for _ in range(30):
                    samples.append(timer(fn, iters) / iters)
                    for p, probe in probes.items():
                        refs[p].append(timer(probe.fn, ref_iters[p]) / ref_iters[p])
                row = stats.setdefault((clock_name, name), {"raw": []} | {p: [] for p in probes})
                row["raw"].append(quantile(samples, Q))
                for p in probes:
                    row[p].append(quantile(samples, Q) / quantile(refs[p], Q))
        time.sleep(args.pause)
    print(f"torch threads {args.threads}, {args.rounds} rounds; spread = max/min over rounds of the {Q:.0%} quantile")
    print(f"{'clock':<8}{'workload':<16}{'raw':>8}" + "".join(f"{'/ ' + p:>10}" for p in probes))
    for (clock_name, name), row in stats.items():
        cells = "".join(f"{max(row[p]) / min(row[p]):>10.2f}" for p in probes)
        print(f"{clock_name:<8}{name:<16}{max(row['raw']) / min(row['raw']):>8.2f}{cells}")


if __name__ == "__main__":
    main()
