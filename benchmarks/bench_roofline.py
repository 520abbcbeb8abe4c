"""Cost of the roofline verdict on the CPU: one count of a step, and one calibration of the roofs.

For each step: the median wall time of one plain call, and of one call under the counting
dispatch modes (FlopCounterMode + the per-op byte counter), which is what every
``measure()`` pays once; then the wall time of calibrating this CPU's roofs (DRAM copy,
LLC copy, a float32 matmul), which a session pays once per fingerprint when pytest's
cache holds no roofs yet. Prints a Markdown table::

    python benchmarks/bench_roofline.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for perf_tests

from perf_tests.models import CPU_CONFIG, MiniLLM, make_batch, train_step_fn
from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.profiling.counting import count_step
from pytest_gpuperf.profiling.roofs import RoofProvider, RoofStore


def _steps() -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(1024, 1024, generator=gen), torch.randn(1024, 1024, generator=gen)
    x = torch.randn(2048, 1024, generator=gen)
    norm = torch.nn.LayerNorm(1024)
    torch.manual_seed(0)
    model = MiniLLM(CPU_CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(CPU_CONFIG, torch.device("cpu"))
    return {
        "matmul 1024^3 fp32": lambda: a @ b,
        "LayerNorm + softmax 2048x1024": lambda: torch.softmax(norm(x), dim=-1),
        "MiniLLM training step (CPU config)": train_step_fn(model, optimizer, inputs, targets),
    }


def _median_seconds(fn: Callable[[], object], repeats: int = 7) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    """Print the table."""
    torch.set_num_threads(1)  # as the plugin measures CPU steps (gpuperf_cpu_threads = 1)
    print("| step | plain call (ms) | counted call (ms) | ratio | ops counted |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, step in _steps().items():
        step()
        count_step(step, lambda: None)  # first-use imports out of the way
        plain = _median_seconds(step)
        counted = _median_seconds(lambda s=step: count_step(s, lambda: None))
        ops = count_step(step, lambda: None).ops
        print(f"| {name} | {plain * 1e3:.2f} | {counted * 1e3:.2f} | {counted / plain:.2f}x | {ops} |")
    backend = CpuBackend()
    started = time.perf_counter()
    roofs = RoofProvider(RoofStore(None)).roofs(backend, backend.fingerprint() | {"world_size": 1}, "float32")
    wall = time.perf_counter() - started
    print(
        f"\nCalibrating this CPU's roofs (DRAM, LLC, float32 compute; best of 5 each): {wall:.2f} s "
        f"({roofs.bandwidth / 1e9:.1f} GB/s DRAM, {(roofs.cache_bandwidth or 0) / 1e9:.1f} GB/s LLC, "
        f"{roofs.peak_flops / 1e9:.1f} GFLOP/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
