"""``git bisect run`` driven by ``pytest --gpuperf --gpuperf-bisect`` on a real slowdown (prints one table).

Builds a scratch repository of ``--commits`` commits whose perf test runs one CPU matmul chain per step; commit
``--bad`` makes the step do ``--factor`` times the work (the same kernels, more of them; the declared work is
unchanged, so the time verdict is what must catch it). The baseline is recorded at the first commit and kept there
(every later commit leaves ``baselines/`` alone), then ``git bisect run`` bisects between the last and the first
commit. Each row is one bisect step: the commit, the exit status (0 good, 1 bad, 125 skip) and the time verdict.

    python benchmarks/bench_bisect.py --commits 16 --bad 9 --factor 2
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF_TEST = """
import torch

torch.set_num_threads(1)
WORK = {work}


def test_chain(gpuperf):
    n = gpuperf.pick(cpu=160, cuda=4096)
    dtype = torch.bfloat16 if gpuperf.backend_name == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(n, n, generator=gen) / n**0.5).to(gpuperf.device, dtype)

    def step():
        out = a
        for _ in range(8 * WORK):
            out = torch.tanh(out @ a)
        return out

    gpuperf.measure(step, flops=8 * 2 * n**3)
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def build(repo: Path, commits: int, bad: int, factor: int, pytest_args: list[str]) -> list[str]:
    """The scratch repository; returns its commits, oldest first."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "bench@example.com")
    _git(repo, "config", "user.name", "bench")
    (repo / "conftest.py").write_text("")
    for number in range(1, commits + 1):
        (repo / "test_perf.py").write_text(PERF_TEST.format(work=factor if number >= bad else 1))
        (repo / "notes.txt").write_text(f"change {number}\n")
        if number == 1:
            subprocess.run([sys.executable, "-m", "pytest", "-q", "--gpuperf-update", *pytest_args], cwd=repo,
                           check=True, capture_output=True)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"change {number}")
    return _git(repo, "log", "--reverse", "--format=%H").split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--bad", type=int, default=9, help="the first slow commit (1-based)")
    parser.add_argument("--factor", type=int, default=2, help="work factor of the slow commits")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    pytest_args = ["-p", "no:cacheprovider", "--gpuperf-backend", args.device, "test_perf.py"]
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder) / "repo"
        started = time.perf_counter()
        shas = build(repo, args.commits, args.bad, args.factor, pytest_args)
        built = time.perf_counter() - started
        first = _git(repo, "bisect", "start", shas[-1], shas[0])
        command = [sys.executable, "-m", "pytest", "-q", "--gpuperf", "--gpuperf-bisect", *pytest_args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        done = subprocess.run(["git", "bisect", "run", *command], cwd=repo, capture_output=True, text=True, env=env)
        out = first + done.stdout
    steps = re.findall(r"\[([0-9a-f]{40})\] change (\d+)", out)
    exits = re.findall(r"gpuperf bisect: exit (\d+) \((.*)\)\n", out)
    verdicts = re.findall(r"time [0-9.]+ [mu]?s [<>] baseline [^(]*\(([+-][0-9.]+%)", out)
    print(f"{args.commits} commits, commit {args.bad} does {args.factor}x the work; baseline recorded in {built:.0f} s")
    print(f"{'bisect step':<12} {'commit':>6} {'exit':>5}  reason")
    for i, (_, number) in enumerate(steps):
        code, reason = exits[i] if i < len(exits) else ("?", "")
        print(f"{i + 1:<12} {number:>6} {code:>5}  {reason}")
    found = re.search(r"([0-9a-f]{40}) is the first bad commit", out)
    answer = shas.index(found.group(1)) + 1 if found else None
    print(f"first bad commit found: {answer} (expected {args.bad}); {time.perf_counter() - started:.0f} s in all")
    if verdicts:
        print("time changes read:", ", ".join(verdicts))


if __name__ == "__main__":
    main()
