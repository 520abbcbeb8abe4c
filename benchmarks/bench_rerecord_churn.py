"""Baselines that do not churn (issue 21 item 5): re-recording unchanged code changes no baseline line.

Writes a new 3-test perf project (a matmul, a layernorm + softmax, an elementwise chain; CPU, one thread) into a
temporary git repository, records its baselines once with ``pytest --gpuperf --gpuperf-update`` and commits
them, then re-records the same code ``--tries`` times, each from the committed file, and counts the lines
``git diff`` shows in ``baselines/`` after each try (what a reviewer would see in the PR).

    python benchmarks/bench_rerecord_churn.py --tries 3

Prints one row per try: exit code, lines added / removed, the wall time, and the update summary's last line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = """
import torch

torch.set_num_threads(1)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_matmul(gpuperf):
    a, b = _randn(512, 512, seed=1), _randn(512, 512, seed=2)
    gpuperf.measure(lambda: a @ b, flops=2 * 512**3)


def test_layernorm_softmax(gpuperf):
    x = _randn(256, 1024, seed=3)
    gpuperf.measure(lambda: torch.softmax(torch.nn.functional.layer_norm(x, (1024,)), -1), items=256, unit="rows")


def test_elementwise(gpuperf):
    x = _randn(1 << 18, seed=4)
    gpuperf.measure(lambda: (x * 2.0 + 1.0).relu() * x)
"""


def git(project: Path, *args: str) -> str:
    """Run git in ``project`` and return its stdout."""
    done = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True)
    return done.stdout


def pytest(project: Path, *args: str) -> tuple[int, float, str]:
    """One fresh ``pytest --gpuperf`` process: exit code, wall seconds, the last line of its output."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--gpuperf", "--gpuperf-backend", "cpu"]
    started = time.perf_counter()
    done = subprocess.run([*command, *args], cwd=project, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    # Why an entry was rewritten: the update summary's "old -> new" lines and the record-time spread warnings.
    why = [line.strip() for line in lines if " -> " in line or "spread between" in line]
    last = lines[-1] if lines else done.stderr[-200:]
    return done.returncode, time.perf_counter() - started, "\n      ".join([last, *why])


def main() -> None:
    """Record once, re-record ``--tries`` times from the committed file, print the diff each left."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-churn-") as tmp:
        project = Path(tmp)
        (project / "test_perf.py").write_text(TESTS)
        git(project, "init", "-q")
        git(project, "config", "user.email", "bench@example.com")
        git(project, "config", "user.name", "bench")
        rc, wall, last = pytest(project, "--gpuperf-update")
        print(f"recorded: rc {rc}, {wall:.1f} s, {last}")
        git(project, "add", "-A")
        git(project, "commit", "-qm", "baselines")
        files = sorted(p.name for p in (project / "baselines").glob("*.yaml"))
        print(f"baseline files: {files}")
        print(f"{'try':>3} {'rc':>3} {'+lines':>7} {'-lines':>7} {'wall s':>7}  summary")
        unchanged = 0
        for attempt in range(1, opts.tries + 1):
            rc, wall, last = pytest(project, "--gpuperf-update")
            added = removed = 0
            for row in git(project, "diff", "--numstat", "--", "baselines").splitlines():
                plus, minus, _ = row.split("\t", 2)
                added, removed = added + int(plus), removed + int(minus)
            unchanged += added == removed == 0
            print(f"{attempt:3d} {rc:3d} {added:7d} {removed:7d} {wall:7.1f}  {last}")
            if added or removed:
                print("    " + git(project, "diff", "--", "baselines").replace("\n", "\n    ")[:2000])
            git(project, "checkout", "-q", "--", "baselines")
        print(f"tries that changed 0 baseline lines: {unchanged} of {opts.tries}")


if __name__ == "__main__":
    main()
