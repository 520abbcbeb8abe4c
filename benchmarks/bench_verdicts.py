"""Verdicts users can trust (issue 14): false failures on unchanged code, detection of real slowdowns, decisiveness.

Writes a perf-test project to a temporary directory, records its baselines once with the plugin's
defaults (``--gpuperf-update``), then runs fresh pytest processes against them: unchanged code
(every failure is a false failure) and code slowed by real extra work in the same kernels
(``BENCH_SCALE``: a GEMM's inner dimension 4096 -> 4480, 70 instead of 64 whole 64-wide K tiles, +9.4% of
the main loop by arithmetic, not yet measured: ``--verify`` times it with do_bench and lists the kernels first;
an elementwise op over 10% more elements, ...). Each run's time verdict per workload is read from the JSON
report: ``regression`` (caught), ``inconclusive`` (passes with a warning; counts as not passed-as-unchanged), or
a pass. ``--workloads`` and ``--scales`` split the work over device calls.

    python benchmarks/bench_verdicts.py --device cpu                  # 2-thread allocation-heavy CPU step
    python benchmarks/bench_verdicts.py --device cuda --verify        # H200: 4 workloads, do_bench check first

``--verify`` (CUDA) times every workload at each scale with ``triton.testing.do_bench`` and lists the
kernel names per scale (torch.profiler), so a claimed +10% is checked to be +10% of the same kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = r'''
"""Workloads of bench_verdicts.py; BENCH_SCALE multiplies the work in the same kernels."""
import os

import torch

from perf_tests.models import GPU_TEST_CONFIG, MiniLLM, make_batch, train_step_fn

SCALE = float(os.environ.get("BENCH_SCALE", "1.0"))
CUDA = os.environ.get("BENCH_DEVICE") == "cuda"
HOST_SYNC = os.environ.get("BENCH_HOST_SYNC") == "1"
if not CUDA:
    torch.set_num_threads(2)  # written as most user code is: the default threads of a 2-core runner


def _randn(*shape, dtype=torch.float32, device="cpu", seed=0):
    gen = torch.Generator(device=str(device)).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=device, dtype=dtype)


def _tiles(value, tile, up=False):
    whole = -(-value // tile) if up else round(value / tile)
    return max(tile, int(whole) * tile)  # whole tiles: the same cuBLAS kernel, no partial tile


def build(name, device):
    """The step of workload ``name`` at BENCH_SCALE on ``device``."""
    if name == "gemm":  # 4096 x K @ K x 4096, bf16: K rounded up to whole 64-wide tiles (4352, 4480: +6.3%, +9.4% of K)
        # The operands are allocated at the largest K (4480) and sliced, so peak memory is the same at every scale
        # and only the time verdict can catch the slowdown.
        k = _tiles(4096 * SCALE, 64, up=True)
        kmax = max(k, 4480)
        a = _randn(4096, kmax, dtype=torch.bfloat16, device=device)
        b = _randn(kmax, 4096, dtype=torch.bfloat16, device=device, seed=1)
        a_k, b_k = a[:, :k], b[:k]
        return lambda: a_k @ b_k
    if name == "gemm_fine":  # 4096 x K @ K x 4096, bf16, K 12800 (200 whole 64-wide tiles)
        # The time grows by about 7/8 of K (the output's write does not grow; --verify measures it), so K grows by
        # 8/7 of the labelled slowdown: 1.04 -> 209 tiles, 1.065 -> 215 tiles.
        k = _tiles(12800 * (1.0 + (SCALE - 1.0) * 8.0 / 7.0), 64)
        kmax = max(k, 14720)  # allocated at +10% and sliced: peak memory is the same at every scale
        a = _randn(4096, kmax, dtype=torch.bfloat16, device=device)
        b = _randn(kmax, 4096, dtype=torch.bfloat16, device=device, seed=1)
        a_k, b_k = a[:, :k], b[:k]
        return lambda: a_k @ b_k
    if name == "conv":  # conv2d fwd+bwd, bf16 channels_last, 25 chunks of 8 x 128 x 56 x 56 (+4%: a 26th chunk)
        import torch.nn.functional as F

        chunks = int(round(25 * SCALE))
        images = _randn(8 * max(chunks, 28), 128, 56, 56, dtype=torch.bfloat16, device=device)
        images = images.to(memory_format=torch.channels_last)
        weight = _randn(128, 128, 3, 3, dtype=torch.bfloat16, device=device, seed=1)
        weight = weight.to(memory_format=torch.channels_last).requires_grad_(True)
        grad = _randn(8, 128, 56, 56, dtype=torch.bfloat16, device=device, seed=2)
        grad = grad.to(memory_format=torch.channels_last)
        # Every chunk is the same shape (the same cuDNN kernels); its gradients are dropped before the next one,
        # so peak memory is one chunk's at every scale.
        parts = [images[8 * i : 8 * (i + 1)].requires_grad_(True) for i in range(chunks)]

        def step():
            for part in parts:
                out = F.conv2d(part, weight, padding=1)
                torch.autograd.grad(out, (part, weight), grad)

        return step
    if name == "attention":  # causal SDPA fwd+bwd, bf16, 4 x 70 heads x 4096 x 128; +4%: 2 more heads' worth
        import torch.nn.functional as F

        # The extra pass over a few heads fills the GPU less well than the main one (2 heads cost +5.7% of 50 by
        # do_bench), so it covers 1/50 of the heads per labelled percent: 1.04 -> 2 heads, 1.10 -> 5.
        heads, extra = 70, int(round(50 * (SCALE - 1.0)))
        q, k, v = (_randn(4, heads, 4096, 128, dtype=torch.bfloat16, device=device, seed=i) for i in range(3))
        g = _randn(4, heads, 4096, 128, dtype=torch.bfloat16, device=device, seed=3)
        leaves = [t.requires_grad_(True) for t in (q, k, v)]
        # The extra work: the same kernels on `extra` of the heads (leaf views into the same storage), run after
        # the main pass's gradients are dropped, so peak memory stays the main pass's.
        part = [t.detach()[:, :extra].requires_grad_(True) for t in (q, k, v)] if extra else []

        def step():
            out = F.scaled_dot_product_attention(*leaves, is_causal=True)
            torch.autograd.grad(out, leaves, g)
            if part:
                out = F.scaled_dot_product_attention(*part, is_causal=True)
                torch.autograd.grad(out, part, g[:, :extra])

        return step
    if name == "elementwise":  # bf16 add over 2^27 elements (+4%: 4% more elements), into a preallocated output
        n, most = int(2**27 * SCALE), int(2**27 * 1.10)
        x = _randn(most, dtype=torch.bfloat16, device=device)
        y = _randn(most, dtype=torch.bfloat16, device=device, seed=1)
        out = torch.empty(most, dtype=torch.bfloat16, device=device)  # peak memory the same at every scale
        x_n, y_n, out_n = x[:n], y[:n], out[:n]
        return lambda: torch.add(x_n, y_n, out=out_n)
    if name == "linear":  # the seed's Linear(4096, 4096) fp16 forward + backward, batch 1024 in 32-row tiles
        torch.manual_seed(0)
        layer = torch.nn.Linear(4096, 4096).to(device, torch.float16)
        x = _randn(_tiles(1024 * SCALE, 32), 4096, dtype=torch.float16, device=device).requires_grad_(True)

        def step():
            layer.zero_grad(set_to_none=True)
            x.grad = None
            y = layer(x)
            y.sum().backward()
            if HOST_SYNC:
                y.sum().item()  # a new host sync per step (the host-overhead check)
            return y

        return step
    if name == "minillm":  # the MiniLLM training step (4 layers, batch 8), sequence length scaled
        from dataclasses import replace

        cfg = replace(GPU_TEST_CONFIG, seq=_tiles(GPU_TEST_CONFIG.seq * SCALE, 64))
        torch.manual_seed(0)
        model = MiniLLM(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inputs, targets = make_batch(cfg, device)
        base = train_step_fn(model, opt, inputs, targets)

        def step():
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                return base()

        return step
    if name == "cpu_alloc":  # allocation-heavy elementwise chain, fresh outputs every op (1.5x: 1.5x the elements)
        x = _randn(int(2**19 * SCALE), device=device)
        return lambda: ((x * 2.0 + 1.0).relu() * x - x.sin()).sum()
    raise KeyError(name)
'''

TESTS = r"""
import pytest
import torch

import bench_workloads
from bench_workloads import build
from pytest_gpuperf.profiling.counting import count_step

NAMES = {names!r}
TOLERANCE = {tolerance!r}


def unslowed_work(name, device):
    # The FLOPs and bytes of the step at BENCH_SCALE 1.0, declared at every scale: the slowdown is real extra work
    # in the same kernels, but the test keeps declaring the same work (as a kernel that got slower would), so the
    # time verdict is what catches it, not the counted-work verdict.
    scale, bench_workloads.SCALE = bench_workloads.SCALE, 1.0
    try:
        step = build(name, device)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        count = count_step(step, sync)
    finally:
        bench_workloads.SCALE = scale
    del step
    return {{"flops": count.flops or None, "bytes_moved": count.bytes or None}}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.gpuperf(**({{"time_tolerance": float(TOLERANCE)}} if TOLERANCE else {{}}))
def test_workload(gpuperf, name):
    work = unslowed_work(name, gpuperf.device)
    gpuperf.measure(build(name, gpuperf.device), **work)
"""

GPU_NAMES = ["gemm", "gemm_fine", "attention", "conv", "elementwise", "linear", "minillm"]
CPU_NAMES = ["cpu_alloc"]


def run_pytest(
    project: Path, device: str, scale: float, args: list[str], report: Path, host_sync: bool = False
) -> dict[str, dict[str, str]]:
    """One fresh pytest process; per workload the verdicts of time (or host overhead), memory, and what judged."""
    env = {**os.environ, "BENCH_SCALE": str(scale), "BENCH_DEVICE": device, "PYTHONPATH": f"{project}:{ROOT}"}
    env["BENCH_HOST_SYNC"] = "1" if host_sync else "0"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--gpuperf"]
    command += ["--gpuperf-backend", device, "--gpuperf-json", str(report), *args, "test_bench.py"]
    subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900, check=False)
    out: dict[str, dict[str, str]] = {}
    if not report.exists():
        return out
    for test in json.loads(report.read_text())["gpuperf"]["tests"]:
        parts = test["nodeid"].rpartition("[")[2].rstrip("]").split("-")
        name = next((part for part in parts if part in GPU_NAMES + CPU_NAMES), "?")
        by_metric = {m["metric"]: m for m in test["metrics"]}
        # A host sync is caught by the exact count of synchronizing operations (step.host_syncs) where the
        # backend counts them, else by the timed host overhead.
        sync_metric = "step.host_syncs" if "step.host_syncs" in by_metric else "step.host_overhead"
        judged = by_metric.get(sync_metric if host_sync else "step.time", {})
        out[name] = {
            "status": judged.get("status", "missing"),
            "memory": by_metric.get("step.peak_memory", {}).get("status", "-"),
            "judged_on": (judged.get("extra") or {}).get("judged_on", "time"),
            "change": f"{judged['ratio'] - 1:+.1%}" if isinstance(judged.get("ratio"), (int, float)) else "?",
            "outcome": test.get("outcome", "?"),
            "failed_metrics": [m["metric"] for m in test["metrics"] if m.get("status") == "regression"],
            "improved_metrics": [m["metric"] for m in test["metrics"] if m.get("status") == "improvement"],
            "sm_clock_mhz": (judged.get("extra") or {}).get("sm_clock_mhz"),
            "cycles_change": (judged.get("extra") or {}).get("cycles_change"),
            "clock_exponent": (judged.get("extra") or {}).get("clock_exponent"),
            "clock_exponent_se": (judged.get("extra") or {}).get("clock_exponent_se"),
            "work_change": (judged.get("extra") or {}).get("work_change"),
            "power_warmup_seconds": (judged.get("extra") or {}).get("power_warmup_seconds"),
            "sustained_sm_clock_mhz": (judged.get("extra") or {}).get("sustained_sm_clock_mhz"),
            "power_capped": (judged.get("extra") or {}).get("power_capped"),
            "gpu_temperature_c": (judged.get("extra") or {}).get("gpu_temperature_c"),
            "method": (judged.get("extra") or {}).get("method"),
            "message": judged.get("message", ""),
        }
    return out


def show_recorded(project: Path) -> None:
    """Each recorded time entry's value and the clock facts the clock rule reads (SM clock, clock exponent)."""
    import yaml

    for path in sorted((project / "baselines").glob("*.yaml")):
        for node, metrics in (yaml.safe_load(path.read_text()).get("tests") or {}).items():
            entry = metrics.get("step.time") or {}
            keys = ("value", "sm_clock_mhz", "clock_exponent", "clock_exponent_se", "power_capped", "process_spread")
            facts = {k: entry.get(k) for k in keys}
            print(f"  baseline {node.rpartition('[')[2].rstrip(']')}: {facts}", flush=True)


def verify(names: list[str], scales: list[float]) -> None:
    """do_bench time and kernel names of each workload at each scale (CUDA)."""
    import torch
    import triton.testing
    from torch.profiler import ProfilerActivity, profile

    sys.path[:0] = [str(ROOT)]
    base_ms: dict[str, float] = {}
    head = f"{'workload':12} {'scale':>6} {'do_bench ms':>12} {'vs 1.0':>8} {'how':>5} {'peak':>14}"
    print(f"{head}  kernels (same as 1.0?)")
    kernels0: dict[str, set[str]] = {}
    for name in names:
        for scale in scales:
            os.environ["BENCH_SCALE"] = str(scale)
            import importlib

            import bench_workloads

            importlib.reload(bench_workloads)
            step = bench_workloads.build(name, torch.device("cuda"))
            step()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            step()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            try:
                ms = triton.testing.do_bench_cudagraph(step, rep=300, return_mode="median")
                how = "graph"
            except Exception:  # noqa: BLE001 - not capturable (a host sync): eager do_bench
                ms = triton.testing.do_bench(step, warmup=100, rep=400, return_mode="median")
                how = "eager"
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            kernels = {e.key for e in prof.key_averages() if e.device_type.name == "CUDA"}
            base_ms.setdefault(name, ms)
            kernels0.setdefault(name, kernels)
            same = "same" if kernels == kernels0[name] else f"DIFFERENT: {sorted(kernels ^ kernels0[name])[:3]}"
            print(
                f"{name:12} {scale:6.3f} {ms:12.4f} {ms / base_ms[name] - 1:+8.1%} {how:>5} {peak / 2**20:10.1f} MiB"
                f"  {len(kernels)} kernels, {same}",
                flush=True,
            )
            if scale == scales[0]:
                print("    " + "; ".join(sorted(k[:70] for k in kernels)[:6]), flush=True)
            del step
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--unchanged", type=int, default=None, help="unchanged runs (pytest processes)")
    parser.add_argument("--slowed", type=int, default=None, help="runs per slowdown (pytest processes)")
    parser.add_argument("--verify", action="store_true", help="CUDA: do_bench + kernel names per scale first")
    parser.add_argument("--verify-only", action="store_true", help="CUDA: only the do_bench + kernel check")
    parser.add_argument(
        "--host-sync", action="store_true", help="also --slowed runs with a host sync added (BENCH_HOST_SYNC=1)"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every observation")
    parser.add_argument(
        "--workloads", default=None, help="comma-separated subset (gemm,attention,elementwise,linear,minillm)"
    )
    parser.add_argument("--scales", default=None, help="comma-separated slowdown scales (default 1.10,1.05 / 1.5)")
    parser.add_argument(
        "--time-tolerance", default="", help="the tests' marker time_tolerance (e.g. 0.02; default: the plugin's)"
    )
    parser.add_argument("--deadline", type=float, default=0.0, help="start no new run after this many seconds")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest flags (after --)")
    opts = parser.parse_args()
    cuda = opts.device == "cuda"
    known = GPU_NAMES if cuda else CPU_NAMES
    names = [n for n in opts.workloads.split(",") if n] if opts.workloads else known
    if unknown := sorted(set(names) - set(known)):
        parser.error(f"unknown workload(s) {unknown} for --device {opts.device}; choose from {known}")
    unchanged = opts.unchanged if opts.unchanged is not None else (10 if cuda else 20)
    slowed = opts.slowed if opts.slowed is not None else (6 if cuda else 10)
    default_scales = [1.10, 1.05] if cuda else [1.5]
    scales = [float(s) for s in opts.scales.split(",") if s] if opts.scales is not None else default_scales
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-verdicts-") as tmp:
        project = Path(tmp)
        (project / "bench_workloads.py").write_text(WORKLOADS)
        (project / "test_bench.py").write_text(TESTS.format(names=names, tolerance=opts.time_tolerance))
        if cuda and (opts.verify or opts.verify_only):
            sys.path.insert(0, str(project))
            verify(names, [1.0, *scales])
            if opts.verify_only:
                return
        env = {**os.environ, "BENCH_SCALE": "1.0", "BENCH_DEVICE": opts.device, "PYTHONPATH": f"{project}:{ROOT}"}
        record = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        record += ["--gpuperf-update", "--gpuperf-backend", opts.device, *opts.pytest_args, "test_bench.py"]
        done = subprocess.run(record, cwd=project, env=env, capture_output=True, text=True, timeout=1800, check=False)
        print(f"recorded baselines in {time.perf_counter() - started:.0f} s (rc {done.returncode})", flush=True)
        show_recorded(project)
        plan: list[tuple[float, int, bool]] = [(1.0, unchanged, False), *[(s, slowed, False) for s in scales]]
        if opts.host_sync:
            plan.append((1.0, slowed, True))
        outcomes: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        rows = []
        for scale, runs, sync in plan:
            label = "sync" if sync else f"{scale:.2f}"
            for i in range(runs):
                if opts.deadline and time.perf_counter() - started > opts.deadline:
                    print(f"  deadline: work {label} stopped after {i} of {runs} runs", flush=True)
                    break
                report = project / f"r-{label}-{i}.json"
                result = run_pytest(project, opts.device, scale, list(opts.pytest_args), report, host_sync=sync)
                for name in names:
                    got = result.get(name, {"status": "missing", "memory": "-", "judged_on": "-", "change": "?"})
                    outcomes[(name, label)][got["status"]] += 1
                    outcomes[(name, label)]["by_cycles"] += got["judged_on"] in (
                        "cycles",
                        "time+cycles",
                        "time+clock exponent",
                    )
                    outcomes[(name, label)]["memory_failed"] += got["memory"] == "regression"
                    outcomes[(name, label)]["improved"] += bool(got.get("improved_metrics"))
                    rows.append({"workload": name, "work": label, "run": i, **got})
                    if opts.out:  # as it goes: a run cut short by its time limit keeps what it measured
                        with opts.out.open("a") as fh:
                            fh.write(json.dumps(rows[-1]) + "\n")
                shown = {
                    n: f"{r['status']} {r['change']} ({r['judged_on']}, "
                    f"a={r.get('clock_exponent')}+-{r.get('clock_exponent_se')})"
                    for n, r in result.items()
                }
                print(f"  work {label} run {i + 1}/{runs}: {shown}", flush=True)
    print()
    print(
        f"{'workload':12} {'work':>6} {'runs':>5} {'failed':>7} {'inconcl.':>9} {'passed':>7} {'decisive':>9} "
        f"{'by cycles':>10} {'mem fail':>9} {'improved':>9}"
    )
    for (name, label), counts in sorted(outcomes.items()):
        runs = sum(v for k, v in counts.items() if k not in ("by_cycles", "memory_failed", "improved"))
        failed = counts.get("regression", 0)
        inconclusive = counts.get("inconclusive", 0)
        passed = runs - failed - inconclusive
        print(
            f"{name:12} {label:>6} {runs:5d} {failed:7d} {inconclusive:9d} {passed:7d} "
            f"{(runs - inconclusive) / max(runs, 1):9.0%} {counts['by_cycles']:10d} {counts['memory_failed']:9d} "
            f"{counts['improved']:9d}"
        )
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
