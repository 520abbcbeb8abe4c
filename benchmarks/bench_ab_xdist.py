"""A/B under pytest-xdist: xdist's default ``load`` against ``--dist loadfile`` (one round of A/B processes per file).

Writes a git repository with one perf-test file of ``--tests`` parametrized tests (a 96x96 matmul + tanh chain on
one CPU thread, or a bf16 GEMM on CUDA), commits it, and runs ``pytest -n 1 --gpuperf --gpuperf-ab HEAD`` on the
unchanged tree with each dist mode, alternating the modes ``--runs`` times. Prints the wall time per run and the
A/B worker processes that ran a test body (each writes its pid to a file).

    python benchmarks/bench_ab_xdist.py --tests 4 --runs 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIB = """import torch


def step(a):
    out = a
    for _ in range(10):
        out = torch.tanh(out @ a)
    return out
"""
TESTS = """import os

import pytest
import torch

import mylib

torch.set_num_threads(1)


@pytest.mark.parametrize("n", {sizes})
def test_step(gpuperf, n):
    with open(os.environ["BENCH_PIDS"], "a") as out:
        out.write(f"{{os.getpid()}}\\n")
    if gpuperf.backend_name == "cpu":
        a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)) / 10
        gpuperf.measure(lambda: mylib.step(a), items=n, unit="rows")
    else:
        a = torch.randn(4096, 4096, device=gpuperf.device, dtype=torch.bfloat16)
        gpuperf.measure(lambda: a @ a, items=1, unit="GEMM")
"""


def git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=4, help="perf tests in the one file")
    parser.add_argument("--runs", type=int, default=2, help="runs per dist mode (alternating)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ab-max-time", default="0.3", help="gpuperf_ab_max_time")
    opts = parser.parse_args()
    rows: dict[str, list[tuple[float, int, int]]] = {"load": [], "loadfile": []}
    with tempfile.TemporaryDirectory(prefix="bench-ab-xdist-") as tmp:
        root = Path(tmp)
        (root / "mylib.py").write_text(LIB)
        sizes = [64 + 8 * i for i in range(opts.tests)]
        (root / "test_perf.py").write_text(TESTS.format(sizes=sizes))
        (root / ".gitignore").write_text("*.pids\n.pytest_cache/\n")
        git(root, "init", "-q")
        git(root, "add", ".")
        git(root, "commit", "-qm", "base")
        for run in range(opts.runs):
            for mode in ("load", "loadfile") if run % 2 == 0 else ("loadfile", "load"):
                pids = root / f"{mode}-{run}.pids"
                command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-n", "1", "--dist", mode]
                command += ["--gpuperf", "--gpuperf-backend", opts.device, "--gpuperf-ab", "HEAD"]
                command += ["-o", f"gpuperf_ab_max_time={opts.ab_max_time}", "test_perf.py"]
                began = time.perf_counter()
                done = subprocess.run(
                    command, cwd=root, env={**os.environ, "BENCH_PIDS": str(pids)}, capture_output=True, text=True
                )
                wall = time.perf_counter() - began
                seen = pids.read_text().split() if pids.exists() else []
                processes = len(set(seen))  # A and B worker processes that ran a test body (both write the file)
                rows[mode].append((wall, processes, done.returncode))
                print(f"run {run + 1} {mode:8}: {wall:6.1f} s, {processes} worker processes, rc {done.returncode}")
    print(f"\n{opts.tests} tests in one file, -n 1, {opts.device}; median of {opts.runs} runs per mode")
    print(f"{'--dist':10} {'wall s':>8} {'processes':>12} {'rc':>4}")
    for mode, results in rows.items():
        walls = [r[0] for r in results]
        print(f"{mode:10} {statistics.median(walls):8.1f} {statistics.median(r[1] for r in results):12.0f} "
              f"{max(r[2] for r in results):4d}")  # fmt: skip


if __name__ == "__main__":
    main()
