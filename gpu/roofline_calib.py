"""Calibrate the analytic roofline verdict against Nsight Compute on a broad set of ops (CUDA GPU + ncu).

Parent (default): for each op, the analytic verdict the plugin gives (one count with
``pytest_gpuperf.profiling.counting``, the device's measured roofs, ``classify``), timed
with CUDA events; then ONE ncu child process (this script with ``--child``) that runs
every op once in its own capture window (a marker kernel, then the op, between
``cudaProfilerStart/Stop``), parsed with the plugin's ncu parser and window splitter, and
classified with its Speed-of-Light rules. Prints the measured roofs (DRAM and L2 per pattern),
the table (analytic next to ncu, the roof each share is taken against, the agreement count)
and how the agreement moves with the latency line (``gpu/roofline_sweep.py`` re-runs that
part offline from the JSON); writes ``roofline_calib.md`` and ``roofline_calib.json`` to ``--out``::

    python gpu/roofline_calib.py --out /tmp/out

``--no-ncu`` prints the analytic half only (any CUDA machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from roofline_sweep import sweep_lines, table

Step = Callable[[], object]


def _r(*shape: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def _adamw(fused: bool) -> Step:
    params = [_r(4096, 1024, dtype=torch.float32, seed=i).requires_grad_(True) for i in range(16)]
    for i, p in enumerate(params):
        p.grad = _r(4096, 1024, dtype=torch.float32, seed=100 + i)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=not fused)
    opt.step()  # the state exists before the first counted call
    return opt.step


def _ops() -> dict[str, Callable[[], Step]]:
    """Builders of each op's step (built one at a time so memory stays small)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def gemm(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16) -> Callable[[], Step]:
        def build() -> Step:
            a, b = _r(m, k, dtype=dtype), _r(k, n, dtype=dtype, seed=1)
            return lambda: a @ b

        return build

    def unary(
        fn: Callable[[torch.Tensor], object], *shape: int, dtype: torch.dtype = torch.bfloat16
    ) -> Callable[[], Step]:
        def build() -> Step:
            x = _r(*shape, dtype=dtype)
            return lambda: fn(x)

        return build

    def embedding() -> Step:
        table = _r(131072, 4096)
        index = torch.randint(0, 131072, (8192,), device="cuda", generator=torch.Generator("cuda").manual_seed(3))
        return lambda: torch.nn.functional.embedding(index, table)

    def attention(causal: bool) -> Callable[[], Step]:
        def build() -> Step:
            q, k, v = (_r(8, 16, 2048, 128, seed=s) for s in range(3))
            return lambda: sdpa(q, k, v, is_causal=causal)

        return build

    def batched() -> Step:
        a, b = _r(4096, 64, 64), _r(4096, 64, 64, seed=1)
        return lambda: torch.bmm(a, b)

    def cross_entropy() -> Step:
        logits = _r(8192, 32000)
        target = torch.randint(0, 32000, (8192,), device="cuda", generator=torch.Generator("cuda").manual_seed(4))
        return lambda: torch.nn.functional.cross_entropy(logits, target)

    def add(n: int, dtype: torch.dtype) -> Callable[[], Step]:
        def build() -> Step:
            a, b = _r(n, dtype=dtype), _r(n, dtype=dtype, seed=1)
            return lambda: a + b

        return build

    return {
        "gemm bf16 8192^3": gemm(8192, 8192, 8192),
        "gemm bf16 4096^3": gemm(4096, 4096, 4096),
        "gemm bf16 16384x128x4096 (skinny)": gemm(16384, 128, 4096),
        "gemm fp32 4096^3 (TF32 off)": gemm(4096, 4096, 4096, torch.float32),
        "gemm fp32 64^3 (tiny)": gemm(64, 64, 64, torch.float32),
        "bmm bf16 4096 x 64^3 (small batched)": batched,
        "layer_norm 16384x4096 bf16": unary(lambda x: torch.nn.functional.layer_norm(x, (4096,)), 16384, 4096),
        "rms_norm 16384x4096 bf16": unary(lambda x: torch.nn.functional.rms_norm(x, (4096,)), 16384, 4096),
        "softmax 16384x4096 bf16": unary(lambda x: torch.softmax(x, dim=-1), 16384, 4096),
        "add 2^28 bf16": add(1 << 28, torch.bfloat16),
        "add 2^21 fp32 (fits in L2)": add(1 << 21, torch.float32),
        "add 2^14 fp32 (tiny)": add(1 << 14, torch.float32),
        "gelu 2^26 bf16": unary(torch.nn.functional.gelu, 1 << 26),
        "sum 2^28 fp32": unary(torch.sum, 1 << 28, dtype=torch.float32),
        "embedding 8192 rows of 131072x4096 bf16": embedding,
        "sdpa bf16 8x16x2048x128": attention(False),
        "sdpa bf16 8x16x2048x128 causal": attention(True),
        "cross_entropy 8192x32000 bf16": cross_entropy,
        "AdamW foreach 16 x 4M fp32": lambda: _adamw(False),
        "AdamW fused 16 x 4M fp32": lambda: _adamw(True),
    }


def _time(step: Step, min_seconds: float = 0.05) -> float:
    """Median per-call seconds of back-to-back calls timed with CUDA events (20 samples)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    end.synchronize()
    iters = max(1, int(min_seconds / 20 / max(start.elapsed_time(end) * 1e-3, 1e-6)))
    samples = []
    for _ in range(20):
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / iters)
    samples.sort()
    return samples[len(samples) // 2]


def analytic(names: list[str]) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
    """The plugin's analytic verdict of each op against this GPU's measured roofs; and those roofs."""
    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.profiling.counting import count_step
    from pytest_gpuperf.profiling.roofline import classify
    from pytest_gpuperf.profiling.roofs import RoofProvider, RoofStore, cache_key

    backend = get_backend("cuda")
    fingerprint = backend.fingerprint() | {"world_size": 1}
    provider = RoofProvider(RoofStore(None))
    rows: dict[str, dict[str, object]] = {}
    for name in names:
        step = _ops()[name]()
        seconds = _time(step)
        count = count_step(step, torch.cuda.synchronize)
        roofs = provider.roofs(backend, fingerprint, count.dtype)
        line = classify(count.flops, count.bytes, seconds, roofs, working_set=count.working_set)
        if line.over_roof:
            level = "compute" if line.compute_share >= line.bandwidth_share else line.level
            refreshed = provider.refresh(backend, fingerprint, count.dtype, level)
            line = classify(count.flops, count.bytes, seconds, refreshed or roofs, working_set=count.working_set)
        rows[name] = {
            **line.as_extra(),
            "bound": line.bound,
            "dtype_class": roofs.dtype_class,
            "cache_bandwidth": roofs.cache_bandwidth,
            "cache_bytes": roofs.cache_bytes,
        }
        print(f"analytic {name}: {line.explain()}", flush=True)
        del step
        torch.cuda.empty_cache()
    return rows, dict(provider.store.load(cache_key(fingerprint)) or {})


def child(names: list[str], manifest: Path) -> None:
    """Under ncu: one capture window per op (marker kernel, one call) after a short warm-up."""
    for name in names:
        step = _ops()[name]()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        torch.cuda._sleep(1)
        step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        with manifest.open("a") as handle:
            handle.write(json.dumps({"node_id": name, "step": "step", "occurrence": 0}) + "\n")
        del step
        torch.cuda.empty_cache()


def ncu(names: list[str], out: Path, timeout: float) -> tuple[dict[str, dict[str, object]], float]:
    """Every op in ONE ncu child; per op the duration-weighted SOL percentages and ncu's verdict."""
    from pytest_gpuperf.profiling.ncu_capture import find_ncu, ncu_prefix, read_manifest, split_windows
    from pytest_gpuperf.profiling.ncu_parse import parse_raw
    from pytest_gpuperf.profiling.ncu_sol_rules import classify_kernels

    tool = find_ncu()
    if tool is None:
        raise SystemExit("ncu is not on PATH (or $GPUPERF_NCU)")
    csv_path, manifest = out / "roofline_calib_ncu.csv", out / "roofline_calib_windows.jsonl"
    for path in (csv_path, manifest):
        path.unlink(missing_ok=True)
    command = [*ncu_prefix(tool, csv_path), sys.executable, __file__, "--child", str(manifest), "--ops", *names]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - started
    (out / "roofline_calib_ncu.log").write_text(done.stdout + done.stderr)
    windows = split_windows(parse_raw(csv_path.read_text()), read_manifest(manifest))
    rows: dict[str, dict[str, object]] = {}
    for (name, _, _), kernels in windows.items():
        if not kernels:
            continue
        sol = classify_kernels(kernels)
        rows[name] = {
            "bound": sol.bound,
            "rule": sol.rule,
            "sm_pct": sol.sm_pct,
            "memory_pct": sol.memory_pct,
            "dram_pct": sol.dram_pct,
            "kernels": len(kernels),
            "kernel_seconds": sum(k.duration_s for k in kernels),
        }
    return rows, wall


def roofs_lines(entry: dict[str, object]) -> list[str]:
    """The measured roofs of the run: DRAM and cache bandwidth per pattern, the cache size, the compute peaks."""
    lines = []
    for what in ("dram", "cache"):
        got = entry.get(what)
        if not isinstance(got, dict):
            lines.append(f"- {what}: not measured")
            continue
        patterns = ", ".join(f"{k} {float(v) / 1e12:.3g}" for k, v in dict(got.get("patterns") or {}).items())
        size = f" (cache {float(got['cache_bytes']) / 2**20:.0f} MiB)" if got.get("cache_bytes") else ""
        lines.append(
            f"- {what}{size}: **{float(got['bandwidth']) / 1e12:.3g} TB/s** ({got.get('pattern')}; {patterns})"
        )
    for cls, got in dict(entry.get("compute") or {}).items():
        lines.append(f"- compute {cls}: {float(got['peak_flops']) / 1e12:.3g} TFLOP/s")
    return lines


def main() -> int:
    """Run the analytic half, then the ncu child, then print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--ops", nargs="*", default=None, help="op names (default: all)")
    parser.add_argument("--no-ncu", action="store_true", help="analytic verdicts only")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=100.0, help="seconds for the one ncu child")
    args = parser.parse_args()
    names = args.ops or list(_ops())
    if args.child is not None:
        child(names, args.child)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    a, entry = analytic(names)
    analytic_wall = time.perf_counter() - started
    try:
        n, wall = ({}, 0.0) if args.no_ncu else ncu(names, args.out, args.timeout)
    except subprocess.TimeoutExpired:  # keep the analytic half: the table shows it without ncu's columns
        print(f"the ncu child ran past --timeout {args.timeout:.0f} s: no ncu verdicts", flush=True)
        n, wall = {}, float(args.timeout)
    data = {"analytic": a, "ncu": n, "ncu_wall_s": wall, "analytic_wall_s": analytic_wall, "roofs": entry}
    (args.out / "roofline_calib.json").write_text(json.dumps(data, indent=1))
    lines = ["Measured roofs:", *roofs_lines(entry), "", *table(a, n)]
    if n:
        lines += ["", "Agreement at other latency lines (same counts, times and roofs):", "", *sweep_lines(data)]
        lines.append(
            f"\nAnalytic half: {analytic_wall:.1f} s; one ncu process for all {len(names)} ops: {wall:.1f} s wall."
        )
    text = "\n".join(lines)
    print(text)
    (args.out / "roofline_calib.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
