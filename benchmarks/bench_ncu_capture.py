"""Cost of pytest-gpuperf's region-only Nsight Compute capture vs a whole-process ``ncu --set full`` capture.

For each perf test (CUDA variant), side by side in one run:

* **plain**: the test once without ncu (``pytest <id>``, smoke mode): start-up cost alone;
* **region**: what ``--gpuperf-ncu`` runs: ncu with ``--profile-from-start off``, the
  Speed-of-Light metrics only, around the step's region in a short ``--gpuperf`` child;
* **full**: the seed article's Step B, ``ncu --set full --target-processes all -o R``
  over the same test run once (every kernel of the process, every section).

Prints a Markdown table (wall seconds, kernels profiled, region/full ratio; goal <= 0.3x)
ready to paste into docs/PERFORMANCE.md. Needs a CUDA GPU and ``ncu`` on PATH::

    python benchmarks/bench_ncu_capture.py --out /tmp/ncu-bench
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from pytest_gpuperf.profiling.ncu_capture import capture_session, find_ncu

DEFAULT_TESTS = (
    "perf_tests/test_seed_kernels.py::test_large_matmul_compute_side[cuda]",
    "perf_tests/test_seed_kernels.py::test_layernorm_softmax_memory_side[cuda]",
)


def run(command: list[str], timeout: float) -> tuple[float, str]:
    """Wall seconds and combined output of one command."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        print(f"warning: exit {done.returncode}: {' '.join(command[:6])} ...\n{done.stdout[-800:]}{done.stderr[-800:]}")
    return wall, done.stdout + done.stderr


def profiled_kernels(output: str) -> int:
    """Kernels ncu profiled, from its ``==PROF== Profiling "name" ...`` progress lines."""
    return sum(1 for line in output.splitlines() if line.startswith("==PROF== Profiling"))


def main() -> int:
    """Measure each test three ways and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*", default=list(DEFAULT_TESTS), help="perf test ids (CUDA variants)")
    parser.add_argument("--out", type=Path, default=Path("gpuperf-artifacts/ncu-bench"), help="reports and CSVs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per ncu run")
    args = parser.parse_args()
    ncu = find_ncu()
    if ncu is None:
        print("ncu is not on PATH: install Nsight Compute (this benchmark needs it and a CUDA GPU)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path.cwd()
    rows = []
    for index, node_id in enumerate(args.tests):
        plain_cmd = [sys.executable, "-m", "pytest", node_id, "-q", "-p", "no:cacheprovider"]
        plain_s, _ = run(plain_cmd, args.timeout)
        csv = args.out / f"region-{index}.csv"
        started = time.perf_counter()
        capture = capture_session(ncu, [node_id], "cuda", root, csv, args.timeout, xdist=True)
        region_s = time.perf_counter() - started
        region_kernels = sum(len(kernels) for kernels in capture.windows.values())
        full_cmd = [ncu, "--set", "full", "--target-processes", "all", "--force-overwrite"]
        full_cmd += ["-o", str(args.out / f"full-{index}"), *plain_cmd]
        full_s, full_out = run(full_cmd, args.timeout)
        rows.append((node_id, plain_s, region_s, region_kernels, full_s, profiled_kernels(full_out)))
        print(f"measured {node_id}: plain {plain_s:.1f} s, region {region_s:.1f} s, full {full_s:.1f} s", flush=True)
    print()
    print(
        "| test | plain run (s) | region-only SOL capture (s) | kernels | whole-process `--set full` (s) | kernels "
        "| region / full |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for node_id, plain_s, region_s, region_k, full_s, full_k in rows:
        name = node_id.split("::", 1)[-1]
        print(
            f"| `{name}` | {plain_s:.1f} | {region_s:.1f} | {region_k} | {full_s:.1f} | {full_k} "
            f"| {region_s / full_s:.2f}x |"
        )
    total_region = sum(r[2] for r in rows)
    total_full = sum(r[4] for r in rows)
    print(
        f"| **all** | {sum(r[1] for r in rows):.1f} | {total_region:.1f} | | {total_full:.1f} | "
        f"| **{total_region / total_full:.2f}x** |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
