"""How close pytest-gpuperf's step times are to the hardware's: against ncu, triton and torch.utils.benchmark.

For GEMMs, norms, elementwise ops, attention and tiny kernels on one CUDA GPU,
prints per op: the plugin's time (``measure_time`` with its default settings,
the value a perf test records), Nsight Compute's ``gpu__time_duration.sum``
summed over the op's kernels (``ncu --clock-control none --cache-control none``,
in a child process), ``triton.testing.do_bench`` (median; it flushes L2 before
every call) and ``torch.utils.benchmark.Timer.blocked_autorange`` (median), each
as a ratio to ncu, and the geometric mean of the ratios (goal: within 1.05x).

    python benchmarks/bench_timing_accuracy.py --out DIR      # needs a CUDA GPU and ncu on PATH

ncu cannot tell which kernels belong to which op, so the child process launches
``torch.cuda._sleep`` (its ``spin_kernel``) before each op's calls as a marker.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

NCU_CALLS = 5
MARKER_WORDS = ("spin_kernel", "sleep")  # ATen's torch.cuda._sleep kernel


def build_ops() -> dict[str, Callable[[], object]]:
    """Ops of different kinds and sizes on random data (never zeros), each a zero-argument callable."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device="cuda", dtype=dtype)

    a8, b8 = randn(8192, 8192), randn(8192, 8192)
    a4, b4 = randn(4096, 4096), randn(4096, 4096)
    a1, b1 = randn(1024, 1024), randn(1024, 1024)
    s256 = randn(256, 256, dtype=torch.float32)
    rows = randn(16384, 4096)
    norm_weight = randn(4096)
    big_x, big_y = randn(1 << 28), randn(1 << 28)
    mid = randn(1 << 24)
    q, k, v = (randn(4, 16, 2048, 128) for _ in range(3))
    tiny = randn(4096, dtype=torch.float32)
    t64 = randn(64, 64, dtype=torch.float32)
    return {
        "gemm bf16 8192^3": lambda: a8 @ b8,
        "gemm bf16 4096^3": lambda: a4 @ b4,
        "gemm bf16 1024^3": lambda: a1 @ b1,
        "gemm fp32 256^3": lambda: s256 @ s256,
        "layernorm 16384x4096": lambda: F.layer_norm(rows, (4096,), norm_weight),
        "rmsnorm 16384x4096": lambda: F.rms_norm(rows, (4096,), norm_weight),
        "softmax 16384x4096": lambda: torch.softmax(rows, dim=-1),
        "add bf16 2^28": lambda: big_x + big_y,
        "gelu bf16 2^24": lambda: F.gelu(mid),
        "sdpa 4x16x2048x128": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiny add 4096": lambda: tiny + 1.0,
        "tiny gemm fp32 64^3": lambda: t64 @ t64,
    }


def ncu_child() -> None:
    """Run under ncu: warm each op up, then a marker kernel and NCU_CALLS calls inside the profiled range."""
    import torch

    ops = build_ops()
    for fn in ops.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in ops.values():
        torch.cuda._sleep(1)
        for _ in range(NCU_CALLS):
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def parse_ncu_csv(text: str) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration.sum in seconds) for each profiled kernel, in launch order."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    reader = csv.DictReader(lines[start:])
    kernels = []
    for row in reader:
        value = (row.get("gpu__time_duration.sum") or "").replace(",", "")
        if not value or not row.get("ID", "").strip().isdigit():
            continue  # the units row
        kernels.append((row["Kernel Name"], float(value) * 1e-9))  # --print-units base: ns
    return kernels


def ncu_times(names: list[str], out_dir: Path) -> dict[str, float]:
    """Per-op seconds per call from one ncu run of this script's child mode."""
    log = out_dir / "ncu_raw.csv"
    cmd = [
        "ncu", "--profile-from-start", "off", "--clock-control", "none", "--cache-control", "none",
        "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw", "--print-units", "base",
        "--log-file", str(log), sys.executable, __file__, "--ncu-child",
    ]  # fmt: skip
    proc = subprocess.run(cmd, check=False, timeout=240, capture_output=True, text=True)
    (out_dir / "ncu_stdout.txt").write_text(proc.stdout + proc.stderr)
    text = log.read_text() if log.exists() else ""
    if '"ID"' not in text:  # some ncu versions print the CSV to stdout even with --log-file
        text = proc.stdout
    if proc.returncode != 0 or '"ID"' not in text:
        raise RuntimeError(f"ncu failed (exit {proc.returncode}); see {out_dir / 'ncu_stdout.txt'}")
    kernels = parse_ncu_csv(text)
    segments: list[list[tuple[str, float]]] = []
    for name, seconds in kernels:
        if any(word in name.lower() for word in MARKER_WORDS):
            segments.append([])
        elif segments:
            segments[-1].append((name, seconds))
    if len(segments) != len(names):
        raise RuntimeError(f"ncu: expected {len(names)} marked segments, found {len(segments)} in {log}")
    out, listing = {}, []
    for op, segment in zip(names, segments, strict=True):
        out[op] = sum(seconds for _, seconds in segment) / NCU_CALLS
        kinds = sorted({kernel[:80] for kernel, _ in segment})
        listing.append(f"{op}: {len(segment)} kernels in {NCU_CALLS} calls: {'; '.join(kinds)}")
    (out_dir / "ncu_kernels.txt").write_text("\n".join(listing) + "\n")
    return out


def plugin_time(fn: Callable[[], object]) -> tuple[float, str]:
    """The plugin's recorded time with its default measuring settings (no baseline: precision stop)."""
    from pytest_gpuperf.backends.cuda import CudaBackend
    from pytest_gpuperf.timing import MeasureConfig, measure_time

    result = measure_time(CudaBackend(), fn, MeasureConfig())
    return result.typical, result.method


def triton_time(fn: Callable[[], object]) -> float:
    try:
        from triton.testing import do_bench
    except ImportError:
        return float("nan")
    return float(do_bench(fn, return_mode="median")) * 1e-3


def torch_benchmark_time(fn: Callable[[], object]) -> float:
    from torch.utils.benchmark import Timer

    return float(Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.3).median)


def geomean(values: list[float]) -> float:
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(math.log(v) for v in finite)) if finite else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=".", help="directory for ncu_raw.csv, timing.json and the table")
    parser.add_argument("--skip-ncu", action="store_true", help="compare against torch.utils.benchmark instead")
    args = parser.parse_args()
    if args.ncu_child:
        ncu_child()
        return
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch

    ops = build_ops()
    started = time.perf_counter()
    have_ncu = shutil.which("ncu") is not None and not args.skip_ncu
    reference: dict[str, float] = {}
    if have_ncu:
        try:
            reference = ncu_times(list(ops), out_dir)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"ncu reference unavailable: {exc}; comparing against torch.utils.benchmark")
            have_ncu = False
    rows = []
    for name, fn in ops.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        plugin, method = plugin_time(fn)
        rows.append({
            "op": name, "plugin": plugin, "method": method, "triton": triton_time(fn),
            "torch_benchmark": torch_benchmark_time(fn), "ncu": reference.get(name, float("nan")),
        })  # fmt: skip
    base_key = "ncu" if have_ncu else "torch_benchmark"
    lines = [
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; ratios to {base_key} (1.00 = same time)",
        f"{'op':<22}{'ncu us':>9}{'plugin us':>11}{'method':>12}{'plugin':>8}{'triton':>8}{'torch.bm':>9}",
    ]
    for row in rows:
        base = row[base_key]
        lines.append(
            f"{row['op']:<22}{row['ncu'] * 1e6:>9.2f}{row['plugin'] * 1e6:>11.2f}{row['method']:>12}"
            f"{row['plugin'] / base:>8.3f}{row['triton'] / base:>8.3f}{row['torch_benchmark'] / base:>9.3f}"
        )
    means = {k: geomean([r[k] / r[base_key] for r in rows]) for k in ("plugin", "triton", "torch_benchmark")}
    lines.append(
        f"{'geometric mean':<22}{'':>9}{'':>11}{'':>12}{means['plugin']:>8.3f}{means['triton']:>8.3f}"
        f"{means['torch_benchmark']:>9.3f}"
    )
    verdict = "met" if abs(math.log(means["plugin"])) <= math.log(1.05) else "NOT met"
    lines.append(f"goal: plugin geometric mean within 1.05x of {base_key}: {verdict}")
    lines.append(f"total {time.perf_counter() - started:.0f} s")
    text = "\n".join(lines)
    print(text)
    (out_dir / "timing_accuracy.txt").write_text(text + "\n")
    (out_dir / "timing_accuracy.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
