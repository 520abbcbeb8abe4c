"""Wall time of the plugin's own tests: inner pytest runs forked from one server vs a new python per run.

Runs ``pytest FILES -q -p no:randomly --inner-runs MODE [-n N]`` for each variant, alternating the variants
within each repeat so that a shared machine's load falls on all of them alike, and prints one row per
variant (median and each run's wall seconds) with the machine's load average before each run.

    python benchmarks/bench_test_suite.py                       # tests/test_markers.py, 1 repeat
    python benchmarks/bench_test_suite.py --repeats 2 tests/test_markers.py tests/test_selection.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: name -> extra pytest arguments
VARIANTS = {
    "subprocess (before)": ["--inner-runs", "subprocess"],
    "fork": ["--inner-runs", "fork"],
    "fork -n 2": ["--inner-runs", "fork", "-n", "2"],
}


def run_once(files: list[str], extra: list[str]) -> tuple[float, int, str]:
    """One pytest run: (wall seconds, exit status, its last line)."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:randomly", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines() or [""]
    return time.perf_counter() - began, done.returncode, lines[-1]


def main() -> None:
    """Parse the command line, run the variants alternately, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=["tests/test_markers.py"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    args = parser.parse_args()
    chosen = [v.strip() for v in args.variants.split(",")]
    seconds: dict[str, list[float]] = {v: [] for v in chosen}
    loads: dict[str, list[float]] = {v: [] for v in chosen}
    for repeat in range(args.repeats):
        order = chosen if repeat % 2 == 0 else chosen[::-1]
        for name in order:
            loads[name].append(os.getloadavg()[0])
            wall, code, last = run_once(args.files, VARIANTS[name])
            seconds[name].append(wall)
            print(f"# {name}: {wall:.1f} s, exit {code}: {last}", flush=True)
    print(f"\nfiles: {' '.join(args.files)}; {os.cpu_count()} CPUs")
    print(f"{'variant':<22} {'median s':>9}  {'runs (s)':<24} load average (1 min) before each")
    for name in chosen:
        runs = ", ".join(f"{s:.1f}" for s in seconds[name])
        load = ", ".join(f"{x:.1f}" for x in loads[name])
        print(f"{name:<22} {statistics.median(seconds[name]):>9.1f}  {runs:<24} {load}")


if __name__ == "__main__":
    main()
