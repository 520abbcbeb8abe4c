"""What the kernel signature costs a passing run on the CPU backend: a table per step.

On the CPU the signature is read from the peak-memory probe's own profiled call (no call of its own), so its cost
is reading that call's op events into a signature (``read ms``, timed on a finished profiler: the precise extra);
with ``memory=False`` it is one profiled call (``alone ms``). For each step the table also shows the step's own
time and the peak-memory probe without and with the signature (the three calls interleaved, medians: on a loaded
machine their difference is noisier than ``read ms``), and the read as a share of one ``measure()``'s timing.
Times are the calling thread's CPU time (one torch thread), so a shared machine's preemptions do not count.

    python benchmarks/bench_signature.py [--repeats 15] [--measure-seconds 2.0]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from pytest_gpuperf.backends.cpu_memory import profiled_peak
from pytest_gpuperf.backends.kernel_probe import cpu_peak_and_signature, cpu_signature, signature_from


def _steps() -> dict[str, Callable[[], object]]:
    """Steps of growing op counts: one matmul, an MLP forward, an MLP training step, a small transformer block."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(256, 256, generator=gen)
    mlp = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    x = torch.rand(64, 256, generator=gen)
    opt = torch.optim.AdamW(mlp.parameters())
    block = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True)
    tokens = torch.rand(8, 64, 128, generator=gen)

    def train() -> object:
        opt.zero_grad()
        loss = mlp(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    def block_train() -> object:
        loss = block(tokens).mean()
        loss.backward()
        return loss

    return {
        "matmul 256": lambda: a @ a,
        "MLP forward (8 Linear)": lambda: mlp(x),
        "MLP training step + AdamW": train,
        "transformer block fwd+bwd": block_train,
    }


def main() -> None:
    """Print the cost table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--measure-seconds", type=float, default=2.0, help="one measure()'s timing, for the share")
    args = parser.parse_args()
    torch.set_num_threads(1)
    header = ("step", "op calls", "step ms", "peak probe ms", "+ signature ms", "read ms", "alone ms", "of measure()")
    rows = []
    for name, step in _steps().items():
        for _ in range(3):  # warm: lazy allocations, the profiler's first start
            step()
            cpu_peak_and_signature(step)
        _, prof = profiled_peak(step)
        signature = signature_from(prof, device=False)
        calls = {
            "step": step,
            "peak": lambda step=step: profiled_peak(step),
            "both": lambda step=step: cpu_peak_and_signature(step),
            "alone": lambda step=step: cpu_signature(step),
            "read": lambda prof=prof: signature_from(prof, device=False),
        }
        times: dict[str, list[float]] = {key: [] for key in calls}
        for _ in range(args.repeats):  # interleaved: a load change hits every column alike
            for key, call in calls.items():
                start = time.thread_time()
                call()
                times[key].append(time.thread_time() - start)
        ms = {key: statistics.median(values) * 1e3 for key, values in times.items()}
        rows.append(
            (
                name,
                str(signature.launches if signature else 0),
                f"{ms['step']:.2f}",
                f"{ms['peak']:.2f}",
                f"{ms['both']:.2f}",
                f"{ms['read']:.2f}",
                f"{ms['alone']:.2f}",
                f"{ms['read'] / 1e3 / args.measure_seconds:.2%}",
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
