"""How a step's time follows the SM clock, sample by sample, in one fresh process (run it in several).

For each workload of ``benchmarks/bench_verdicts.py``: a power warm-up, then samples of back-to-back calls timed by
CUDA events. Each sample gets two clocks: the mean of one NVML reading before and one after it (what the plugin
reads), and the mean of a background poller's readings taken while it ran. Also the kernels one call launches, so
a process that picked other kernels shows. Writes JSON lines; ``--summarize`` reads them back as a table:

    for i in 1 2 3 4 5; do python3 gpu/clock_probe.py --out $OUT/probe.jsonl; done
    python3 gpu/clock_probe.py --summarize $OUT/probe.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def workloads_module() -> types.ModuleType:
    """``bench_workloads`` as benchmarks/bench_verdicts.py writes it, built in memory."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import bench_verdicts

    module = types.ModuleType("bench_workloads")
    exec(compile(bench_verdicts.WORKLOADS, "bench_workloads", "exec"), module.__dict__)
    return module


def poll_clocks(reader, stop: threading.Event, into: list[tuple[float, float]]) -> None:
    """Read the SM clock every ~0.5 ms until ``stop``; each reading with its host time."""
    while not stop.is_set():
        into.append((time.perf_counter(), float(reader().sm_clock_mhz)))
        time.sleep(0.0005)


def probe(name: str, samples: int, calls: int, warm_s: float, graph: bool = False) -> dict:
    """One workload's samples: device ms per call, the bracketing clock, the polled clock."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_gpuperf.timing.cuda.nvml import current_device_reader

    torch.cuda.empty_cache()  # a rebuild gets new device memory, not the last build's cached blocks
    spacer = torch.empty(random.randint(1, 64) << 20, dtype=torch.uint8, device="cuda")  # noqa: F841 - kept alive
    step = workloads_module().build(name, torch.device("cuda"))
    reader = current_device_reader()
    if graph:  # device time only: one call captured in a CUDA graph, replayed
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            step()
        step = captured.replay
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        step()
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted({e.key[:60] for e in prof.key_averages() if e.device_type.name == "CUDA"})
    polls: list[tuple[float, float]] = []
    stop = threading.Event()
    poller = threading.Thread(target=poll_clocks, args=(reader, stop, polls), daemon=True)
    poller.start()
    rows = []
    for _ in range(samples):
        torch.cuda.synchronize()
        before = reader().sm_clock_mhz
        t0 = time.perf_counter()
        start, stop_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            step()
        stop_event.record()
        stop_event.synchronize()
        t1 = time.perf_counter()
        after = reader().sm_clock_mhz
        inside = [mhz for t, mhz in polls if t0 <= t <= t1]
        rows.append(
            {
                "ms": start.elapsed_time(stop_event) / calls,
                "bracket_mhz": (before + after) / 2.0,
                "polled_mhz": statistics.fmean(inside) if inside else None,
                "polls": len(inside),
            }
        )
    stop.set()
    poller.join()
    temperature = reader().temperature_c
    return {"workload": name, "pid": os.getpid(), "kernels": kernels, "samples": rows, "temperature_c": temperature}


def fit(clocks: list[float], times: list[float]) -> tuple[float, float]:
    """Least-squares ``a`` in ``log t = c - a log f`` and its standard error."""
    x, y = [math.log(c) for c in clocks], [math.log(t) for t in times]
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxx = sum((v - mx) ** 2 for v in x)
    if sxx <= 0 or len(x) < 3:
        return float("nan"), float("nan")
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sxx
    resid = [b - my - slope * (a - mx) for a, b in zip(x, y, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / (len(x) - 2) / sxx)
    return -slope, se


def summarize(path: Path) -> None:
    """Per workload and process: median ms, clocks, fitted exponents (bracket, polled), cycles' spread."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print("| workload | pid | median ms | bracket MHz | polled MHz | a (bracket) | a (polled) | ms x MHz | kernels |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    for row in rows:
        s = [r for r in row["samples"] if r["polled_mhz"]]
        ms = [r["ms"] for r in s]
        a_b = fit([r["bracket_mhz"] for r in s], ms)
        a_p = fit([r["polled_mhz"] for r in s], ms)
        cycles = statistics.median(r["ms"] * r["polled_mhz"] for r in s)
        print(
            f"| {row['workload']} | {row['pid']} | {statistics.median(ms):.4f} | "
            f"{statistics.median(r['bracket_mhz'] for r in s):.0f} | "
            f"{statistics.median(r['polled_mhz'] for r in s):.0f}"
            f" | {a_b[0]:.2f}+-{a_b[1]:.2f} | {a_p[0]:.2f}+-{a_p[1]:.2f} | {cycles:.1f} | {len(row['kernels'])} |"
            f" {row.get('temperature_c', '')} |"
        )
    for name in sorted({r["workload"] for r in rows}):
        kernel_sets = {tuple(r["kernels"]) for r in rows if r["workload"] == name}
        print(f"{name}: {len(kernel_sets)} distinct kernel set(s) across processes")
        if len(kernel_sets) > 1:
            for ks in kernel_sets:
                print("   ", list(ks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workloads", default="gemm_fine,conv")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warm", type=float, default=3.0)
    parser.add_argument("--summarize", type=Path)
    parser.add_argument("--graph", action="store_true", help="replay one call from a CUDA graph")
    parser.add_argument("--rebuilds", type=int, default=1, help="build each workload this often (new allocations)")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    with args.out.open("a") as out:
        for name in args.workloads.split(","):
            for _ in range(args.rebuilds):
                row = probe(name, args.samples, args.calls, args.warm, args.graph)
                out.write(json.dumps(row) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
