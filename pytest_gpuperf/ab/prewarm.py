"""What a gated A/B worker does while it waits for its turn: the one-time costs of its first test, paid early.

A worker's first test costs more than its others (the FLOP/byte counter's first dispatch, cuBLAS's handle and
workspace, the lazily imported judging and timing modules). A gated worker waits before its turn (its start-up
overlaps the other side's workers), so it pays those costs then, and its first test measures like the others.
Nothing here is timed or judged; the GPU work is a few small matmuls, done before the worker says it is ready.
"""

from __future__ import annotations

import importlib

#: Modules the measuring path imports on its first use (fixture.py, timing/, judging/, profiling/).
LAZY_MODULES = (
    "torch.utils.flop_counter",
    "pytest_gpuperf.timing",
    "pytest_gpuperf.timing.metrics",
    "pytest_gpuperf.timing.cuda.device_time",
    "pytest_gpuperf.timing.cuda.graph",
    "pytest_gpuperf.timing.cuda.nvml",
    "pytest_gpuperf.timing.cuda.power_state",
    "pytest_gpuperf.measuring.plan",
    "pytest_gpuperf.measuring.probes",
    "pytest_gpuperf.timing.cuda.host_syncs",
    "pytest_gpuperf.judging.service",
    "pytest_gpuperf.judging.compare",
    "pytest_gpuperf.profiling.analytic",
    "pytest_gpuperf.profiling.counting",
    "pytest_gpuperf.profiling.op_traffic",
    "pytest_gpuperf.profiling.roofline",
)


def prewarm() -> list[str]:
    """Import the measuring path's lazy modules, count a small step's FLOPs, make cuBLAS's handles.

    Returns what failed (each ``"what: why"``); a failure here only leaves that cost to the first test.
    """
    failed = []
    for name in LAZY_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - an optional part (NVML, say) missing: the test will say so
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    try:
        _warm_libraries()
    except Exception as exc:  # noqa: BLE001 - a failing CUDA start shows up again in the test itself
        failed.append(f"libraries: {type(exc).__name__}: {exc}")
    return failed


def _warm_libraries() -> None:
    """The counter's first dispatch (on the CPU), and on CUDA cuBLAS's handle for float32 and bfloat16."""
    import torch

    from pytest_gpuperf.profiling.counting import count_step

    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    count_step(lambda: a @ a, lambda: None)
    if not torch.cuda.is_available():
        return
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        b = torch.randn(64, 64, generator=gen, device="cuda", dtype=dtype)
        count_step(lambda b=b: b @ b, torch.cuda.synchronize)
