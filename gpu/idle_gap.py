"""How fast does the bench's GEMM run right after the GPU idled for a while (the first test of an A/B worker)?

One process: the GEMM of ``benchmarks/bench_ab.py`` (8192 x 4096 x 8192, bfloat16) runs for 4 s to reach the
power-capped state, then for each idle gap the GPU sleeps that long and the GEMM resumes for 2.5 s, timed in
batches of 4 GEMMs between CUDA events with NVML's SM clock and power read after each batch. The table: per gap,
time per GEMM in windows after the resume, relative to the steady state before the gap, and the SM clock there.

    python3 gpu/idle_gap.py --out $OUT/idle_gap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from pytest_gpuperf.timing.cuda.nvml import current_device_reader

GAPS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 5.0)
WINDOWS = ((0.0, 0.3), (0.3, 0.6), (0.6, 1.0), (1.0, 1.5), (1.5, 2.5))


def load(a: torch.Tensor, b: torch.Tensor, seconds: float, read) -> list[tuple[float, float, float, float]]:
    """Run the GEMM for ``seconds``: (time since start, ms per GEMM, SM clock MHz, power W) per batch."""
    out = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(4):
            a @ b
        e1.record()
        e1.synchronize()
        reading = read()
        out.append((time.perf_counter() - start, e0.elapsed_time(e1) / 4, reading.sm_clock_mhz, reading.power_w))
    return out


def main() -> None:
    """Run the gaps (twice each, in order) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(8192, 4096, generator=gen, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 8192, generator=gen, device="cuda", dtype=torch.bfloat16)
    read = current_device_reader()
    rows = []
    for repeat in range(args.repeats):
        for gap in GAPS:
            before = load(a, b, 4.0, read)
            steady = statistics.median(ms for t, ms, _, _ in before if t > 3.0)
            steady_clock = statistics.median(c for t, _, c, _ in before if t > 3.0)
            time.sleep(gap)
            after = load(a, b, 2.5, read)
            row = {"repeat": repeat, "gap_s": gap, "steady_ms": steady, "steady_mhz": steady_clock, "windows": []}
            for lo, hi in WINDOWS:
                inside = [(ms, c, p) for t, ms, c, p in after if lo <= t < hi]
                if inside:
                    row["windows"].append(
                        {
                            "from_s": lo,
                            "to_s": hi,
                            "speed": steady / statistics.median(ms for ms, _, _ in inside),
                            "mhz": statistics.median(c for _, c, _ in inside),
                            "w": statistics.median(p for _, _, p in inside),
                        }
                    )
            rows.append(row)
    head = "gap s  rep  steady ms  steady MHz  " + "  ".join(f"{lo:.1f}-{hi:.1f}s speed/MHz" for lo, hi in WINDOWS)
    print(head)
    for row in rows:
        cells = "  ".join(f"{w['speed']:6.3f} {w['mhz']:5.0f}      " for w in row["windows"])
        print(f"{row['gap_s']:5.2f}  {row['repeat']:>3}  {row['steady_ms']:9.3f}  {row['steady_mhz']:10.0f}  {cells}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main()
