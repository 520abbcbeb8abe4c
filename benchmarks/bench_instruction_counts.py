"""A measure that travels for the CPU backend (issue 21 item 3): instruction counts against thread CPU time.

Instruction counts are what CodSpeed judges on noisy runners: the same code executes the same instructions
whatever else runs and however fast the machine is. Two ways to count them here:

* hardware counters through ``perf_event_open`` (``PERF_COUNT_HW_INSTRUCTIONS``): this script asks the
  kernel for one and prints the answer (errno);
* valgrind's callgrind, which counts every instruction it executes (``Ir``) in software: this script runs
  the perf suite's CPU matmul step (1024 x 1024 fp32, one torch thread) under ``valgrind --tool=callgrind``
  with 0 and ``--steps`` calls of the step, ``--repeats`` times each, and once at 1.5x the work; the
  difference of the totals divided by the steps is the instructions per step. Beside it, the same step's
  thread CPU time (the CPU backend's clock) in ``--repeats`` fresh plain processes.

    python benchmarks/bench_instruction_counts.py --steps 10 --repeats 2

Prints one table: per configuration the wall seconds of the run, the ``Ir`` total, and the per-step count or
time with its spread between processes (max / min - 1).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP = r"""
import sys, time
import torch

torch.set_num_threads(1)
n = int(round(1024 * float(sys.argv[2]) / 16)) * 16  # rows: 1.5x the rows is 1.5x the work
n_cols = 1024
gen = torch.Generator().manual_seed(1)
a = torch.randn(n, 1024, generator=gen)
b = torch.randn(1024, n_cols, generator=gen)
out = torch.empty(n, n_cols)
steps = int(sys.argv[1])
torch.mm(a, b, out=out)  # one warm-up call in every configuration: the difference is the steps alone
start = time.thread_time()
for _ in range(steps):
    torch.mm(a, b, out=out)
elapsed = time.thread_time() - start
print(f"THREAD_SECONDS_PER_STEP {elapsed / max(steps, 1):.6g}")
"""


def hardware_counter_errno() -> str:
    """Open ``PERF_COUNT_HW_INSTRUCTIONS`` for this process: ``'ok'`` or the errno's name and text."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    libc = ctypes.CDLL(None, use_errno=True)
    attr = bytearray(128)
    struct.pack_into("IIQ", attr, 0, 0, 128, 1)  # PERF_TYPE_HARDWARE, size, PERF_COUNT_HW_INSTRUCTIONS
    struct.pack_into("Q", attr, 40, 1 | (1 << 5) | (1 << 6))  # disabled, exclude_kernel, exclude_hv
    buffer = ctypes.create_string_buffer(bytes(attr), 128)
    fd = libc.syscall(298, buffer, 0, -1, -1, 0)  # __NR_perf_event_open on x86-64
    if fd >= 0:
        os.close(fd)
        return "ok"
    err = ctypes.get_errno()
    return f"{__import__('errno').errorcode.get(err, err)} ({os.strerror(err)})"


def run_callgrind(script: Path, steps: int, scale: float, out_dir: Path) -> tuple[float, int]:
    """Wall seconds and ``Ir`` total of one callgrind run of the step script."""
    out = out_dir / f"cg.{steps}.{scale}.{time.monotonic_ns()}"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, str(script)]
    started = time.perf_counter()
    done = subprocess.run([*command, str(steps), str(scale)], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"callgrind run failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, int(match.group(1))


def run_plain(script: Path, steps: int) -> tuple[float, float]:
    """Wall seconds of a plain fresh process and its thread CPU seconds per step."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(script), str(steps), "1.0"], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    return seconds, float(done.stdout.split("THREAD_SECONDS_PER_STEP")[1].split()[0])


def spread(values: list[float]) -> str:
    """``max / min - 1`` of positive values, as a percentage."""
    return f"{max(values) / min(values) - 1.0:.2%}" if values and min(values) > 0 else "-"


def main() -> None:
    """Count, time and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="calls of the step in the counted runs")
    parser.add_argument("--repeats", type=int, default=2, help="callgrind runs per configuration")
    parser.add_argument("--plain", type=int, default=6, help="fresh plain processes timed by thread CPU time")
    args = parser.parse_args()
    print(f"perf_event_open(PERF_COUNT_HW_INSTRUCTIONS): {hardware_counter_errno()}")
    with open("/proc/loadavg", encoding="utf-8") as handle:
        print(f"load average at start: {handle.read().split()[0]}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "step.py"
        script.write_text(STEP)
        plain = [run_plain(script, 50) for _ in range(args.plain)]
        times = [t for _, t in plain]
        rows.append(
            (
                f"plain, {args.plain} fresh processes, 50 steps",
                f"{sum(w for w, _ in plain) / len(plain):.1f}",
                "-",
                f"{min(times) * 1e3:.2f}..{max(times) * 1e3:.2f} ms/step (thread CPU)",
                spread(times),
            )
        )
        counted: dict[tuple[int, float], list[tuple[float, int]]] = {}
        for steps, scale in [(0, 1.0), (args.steps, 1.0), (0, 1.5), (args.steps, 1.5)]:
            counted[(steps, scale)] = [run_callgrind(script, steps, scale, Path(tmp)) for _ in range(args.repeats)]
            for seconds, total in counted[(steps, scale)]:
                rows.append((f"callgrind, {steps} steps, {scale}x work", f"{seconds:.1f}", f"{total}", "", ""))
        for scale in (1.0, 1.5):
            per_step = [
                (with_steps - without) / args.steps
                for (_, with_steps), (_, without) in zip(counted[(args.steps, scale)], counted[(0, scale)], strict=True)
            ]
            rows.append(
                (
                    f"callgrind per step, {scale}x work",
                    "-",
                    "-",
                    f"{min(per_step) / 1e6:.2f}..{max(per_step) / 1e6:.2f} M instructions/step",
                    spread(per_step),
                )
            )
    header = ("configuration", "wall s", "Ir total", "per step", "spread")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
