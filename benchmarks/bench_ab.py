"""A/B against a git ref (``--gpuperf-ab HEAD``) next to stored-baseline judging, on the same code changes.

Writes a git repository to a temporary folder whose perf test calls a function of the repository
(``mylib.py``), commits it, then changes the working tree and runs real pytest subprocesses:

* ``unchanged``: the working tree equals HEAD (every failure is a false alarm);
* ``slower``: the function does 1.5x the work (CPU: 15 instead of 10 matmul+tanh rounds;
  CUDA: a bf16 GEMM with K 4096 -> 4480, whole 64-wide K tiles: +9.4% of K, which gpu/ab.sh measures with
  do_bench first; K 4512, a partial tile, cost a 4096^2 GEMM +22.7% on the H200, see docs/PERFORMANCE.md);
* ``faster``: the function does 20% less work (CPU: 8 rounds; CUDA: K 3264).

Each case runs ``--runs`` times with ``pytest --gpuperf --gpuperf-ab HEAD`` (no baseline file) and
``--runs`` times with ``pytest --gpuperf`` against a baseline recorded once at HEAD. Prints a table of
outcomes per case and mode, the median change and the cost, and writes every observation as JSON.

    python benchmarks/bench_ab.py                      # this CPU: ~35 min on 2 shared cores
    python benchmarks/bench_ab.py --runs 3 --cases unchanged,slower
    python benchmarks/bench_ab.py --device cuda        # gpu/ab.sh
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIB = '''"""The code under test: its work is what the benchmark changes."""
import torch

WORK = {work}  # CPU: rounds of matmul + tanh per step
K = {k}  # CUDA: inner dimension of the GEMM


def cpu_step(a):
    out = a
    for _ in range(WORK):
        out = torch.tanh(out @ a)
    return out


def gemm_inputs(device):
    # Allocated at the largest K of every case ({k_max}) and sliced: peak memory is the same in every case, so only
    # the time verdict can catch the slower one.
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(8192, {k_max}, generator=gen, device=device, dtype=torch.bfloat16)
    b = torch.randn({k_max}, 8192, generator=gen, device=device, dtype=torch.bfloat16)
    return a[:, :K], b[:K]


def gemm(a, b):
    return a @ b
'''
TEST = """import pytest
import torch

import mylib

torch.set_num_threads(1)  # one thread on a shared CI runner (see docs/PERFORMANCE.md)


@pytest.mark.parametrize("i", range({tests}))
def test_step(gpuperf, i):
    if gpuperf.backend_name == "cpu":
        a = torch.randn(96, 96, generator=torch.Generator().manual_seed(0)) / 10
        gpuperf.measure(lambda: mylib.cpu_step(a), items=96, unit="rows")
    else:
        a, b = mylib.gemm_inputs(gpuperf.device)
        gpuperf.measure(lambda: mylib.gemm(a, b), items=1, unit="GEMM")
"""
CASES = {
    "cpu": {"unchanged": (10, 4096), "slower": (15, 4096), "faster": (8, 4096)},
    "cuda": {"unchanged": (10, 4096), "slower": (10, 4480), "faster": (10, 3264)},
}
#: The GEMM's operands are allocated at this K in every case and sliced to the case's K (constant peak memory).
K_MAX = max(k for _, k in CASES["cuda"].values())
NODE = "test_perf.py::test_step[0-{device}]"
#: ``--log-tests``: a conftest in the benchmark's repository (both sides have it) that appends one JSON line per perf
#: test to ``$BENCH_AB_TEST_LOG``: process id, when its call ended, its judged value and the timing record's facts
#: (SM clock, power warm-up). Which test a worker measured first, and at what clock, comes from these lines.
LOG_CONFTEST = """import json
import os
import time


def pytest_runtest_logreport(report):
    path = os.environ.get("BENCH_AB_TEST_LOG")
    payload = getattr(report, "gpuperf", None)
    if not path or report.when != "call" or not payload:
        return
    for verdict in payload.get("verdicts", []):
        if verdict["metric"] == "step.throughput":
            row = {"pid": os.getpid(), "nodeid": report.nodeid, "end": time.time(), "duration": report.duration}
            row.update(value=verdict["value"], extra=verdict.get("extra", {}))
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\\n")
"""


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, device: str, tests: int = 1, log_tests: bool = False) -> None:
    """The committed repository at its base state."""
    root.mkdir(parents=True)
    work, k = CASES[device]["unchanged"]
    (root / "mylib.py").write_text(LIB.format(work=work, k=k, k_max=K_MAX))
    (root / "test_perf.py").write_text(TEST.format(tests=tests))
    if log_tests:
        (root / "conftest.py").write_text(LOG_CONFTEST)
    (root / ".gitignore").write_text("stored/\nempty/\n*.json\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")


#: ``--keep-cache``: let the runs share pytest's cache (measured roofs), as a user's repeated runs do.
KEEP_CACHE = False


def pytest_run(
    root: Path, device: str, args: list[str], report: Path, test_log: Path | None = None
) -> tuple[dict, float, int, str]:
    """One pytest subprocess; its JSON report, wall seconds, exit code and output tail."""
    report.unlink(missing_ok=True)
    env = {**os.environ, "BENCH_AB_TEST_LOG": str(test_log)} if test_log else None
    cmd = [sys.executable, "-m", "pytest", "test_perf.py", "--gpuperf", "--gpuperf-backend", device]
    cmd += [] if KEEP_CACHE else ["-p", "no:cacheprovider"]  # without it every process, each worker too, measures roofs
    cmd += ["-p", "no:randomly", "-q", "--gpuperf-json", str(report), *args]
    began = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - began
    try:
        document = json.loads(report.read_text())
    except (OSError, ValueError):
        document = {}
    return document, wall, proc.returncode, (proc.stdout + proc.stderr)[-3000:]


def observe(mode: str, case: str, document: dict, wall: float, code: int, tail: str, node: str) -> dict:
    """One observation: outcome, judged status and change of the throughput metric."""
    gp = document.get("gpuperf", {})
    row = {"mode": mode, "case": case, "exit": code, "wall_s": round(wall, 2), "status": "error", "change": None}
    if mode == "ab":
        test = (gp.get("ab") or {}).get("tests", {}).get(node)
        if test:
            metric = next((m for m in test["metrics"] if m["metric"] == "step.throughput"), None)
            row["status"] = test["status"]
            others = [m for m in test["metrics"] if m["metric"] != "step.throughput"]
            row["doubtful"] = [  # every other metric that did not pass outright: what made the test doubtful
                {"metric": m["metric"], "status": m["status"], "message": m.get("message", "")}
                for m in others
                if m["status"] not in ("unchanged", "info", "new", "recorded", "improvement")
            ]
            if metric:
                row.update(change=metric["ratio"], a=metric["a_values"], b=metric["b_values"], pairs=metric["pairs"])
                row["message"] = metric["message"]
            row["cost_per_test_s"] = gp["ab"].get("cost_per_test_s")
            row["wall_per_test_s"] = gp["ab"].get("wall_per_test_s")
            row["processes"] = gp["ab"].get("processes")
            row["workers"] = gp["ab"].get("workers")  # each worker's seconds and its tests' call seconds
            row["tests"] = {  # every test's throughput verdict: which ones needed more pairs, and why
                nodeid: {
                    "status": t.get("status"),
                    **{
                        key: m.get(key)
                        for m in t.get("metrics", [])
                        if m.get("metric") == "step.throughput"
                        for key in ("a_values", "b_values", "pairs", "message")
                    },
                }
                for nodeid, t in (gp["ab"].get("tests") or {}).items()
            }
            row["ab_wall_s"] = gp["ab"].get("wall_s")
    else:
        test = next((t for t in gp.get("tests", []) if t["nodeid"] == node), None)
        row["call_s"] = {t["nodeid"]: t.get("duration") for t in gp.get("tests", [])}
        if test:
            metric = next((m for m in test["metrics"] if m["metric"] == "step.throughput"), None)
            row["status"] = metric["status"] if metric else test["status"]
            row["change"] = metric.get("ratio") if metric else None
    if row["status"] == "error" or code != 0:
        row["tail"] = tail  # what failed, also when it was another test of the file than the one observed
    return row


def outcome_of(row: dict) -> str:
    """failed / inconclusive / passed from an observation (exit code and status)."""
    if row["status"] == "error":
        return "error"
    if row["exit"] != 0 or row["status"] in ("regression", "changed"):
        return "failed"
    return "inconclusive" if row["status"] == "inconclusive" else "passed"


def table(rows: list[dict]) -> list[str]:
    """The summary table: per case and mode, outcomes, improvements shown, median change and wall time."""
    lines = ["case       mode    runs  failed  inconclusive  passed  improvement  median change  wall s/run"]
    for case in dict.fromkeys(r["case"] for r in rows):
        for mode in ("ab", "stored"):
            group = [r for r in rows if r["case"] == case and r["mode"] == mode]
            if not group:
                continue
            outcomes = [outcome_of(r) for r in group]
            changes = [r["change"] for r in group if isinstance(r["change"], (int, float))]
            change = f"{(statistics.median(changes) - 1) * 100:+.1f}%" if changes else "-"
            improved = sum(1 for r in group if r["status"] == "improvement")
            wall = statistics.median(r["wall_s"] for r in group)
            lines.append(
                f"{case:<10} {mode:<7} {len(group):>4}  {outcomes.count('failed'):>6}  "
                f"{outcomes.count('inconclusive'):>12}  {outcomes.count('passed'):>6}  {improved:>11}  "
                f"{change:>13}  {wall:>10.1f}"
                + (f"  ({outcomes.count('error')} errors)" if "error" in outcomes else "")
            )
    return lines


def main() -> int:
    """Run the cases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=sorted(CASES))
    parser.add_argument("--runs", type=int, default=10, help="runs per case and mode")
    parser.add_argument("--cases", default="unchanged,slower,faster")
    parser.add_argument("--modes", default="ab,stored")
    parser.add_argument("--ab-max-time", default="0.5", help="gpuperf_ab_max_time of the A/B runs")
    parser.add_argument("--out", default="", help="write every observation to this JSON file")
    parser.add_argument("--deadline", type=float, default=0.0, help="start no new run after this many seconds")
    parser.add_argument("--tests", type=int, default=1, help="perf tests in the file (the same step, parametrized)")
    parser.add_argument(
        "--keep-cache", action="store_true", help="share pytest's cache between runs (roofs measured once)"
    )
    parser.add_argument(
        "--log-tests", default="", help="folder for one JSON-lines file per run: every perf test of every process"
    )
    args = parser.parse_args()
    global KEEP_CACHE
    KEEP_CACHE = args.keep_cache
    node = NODE.format(device=args.device)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        root = Path(tmp) / "repo"
        log_dir = Path(args.log_tests) if args.log_tests else None
        if log_dir:
            log_dir.mkdir(parents=True, exist_ok=True)
        make_repo(root, args.device, args.tests, log_tests=bool(log_dir))
        report = Path(tmp) / "report.json"
        modes = args.modes.split(",")
        if "stored" in modes:
            _, wall, code, tail = pytest_run(
                root, args.device, ["--gpuperf-update", "-o", "gpuperf_baselines=stored"], report
            )
            print(f"baseline recorded at HEAD in {wall:.1f} s (exit {code})", flush=True)
            if code != 0:
                print(tail)
                return 1
        began = time.perf_counter()
        for run in range(args.runs):  # cases interleaved: a deadline leaves every case with runs
            if args.deadline and time.perf_counter() - began > args.deadline:
                print(f"deadline of {args.deadline:g} s reached: no further runs started", flush=True)
                break
            for case in args.cases.split(","):
                work, k = CASES[args.device][case]
                (root / "mylib.py").write_text(LIB.format(work=work, k=k, k_max=K_MAX))
                if case == "unchanged":
                    git(root, "checkout", "--", "mylib.py")
                for mode in modes:
                    extra = ["-o", "gpuperf_baselines=stored"]
                    if mode == "ab":
                        extra = ["--gpuperf-ab", "HEAD", "-o", f"gpuperf_ab_max_time={args.ab_max_time}"]
                        extra += ["-o", "gpuperf_baselines=empty"]
                    log = log_dir / f"{case}-{mode}-{run + 1}.jsonl" if log_dir else None
                    document, wall, code, tail = pytest_run(root, args.device, extra, report, log)
                    row = observe(mode, case, document, wall, code, tail, node)
                    rows.append(row)
                    change = "-" if row["change"] is None else f"{(row['change'] - 1) * 100:+.1f}%"
                    print(
                        f"{case} {mode} run {run + 1}: {row['status']} (exit {code}), {change}, {wall:.1f} s",
                        flush=True,
                    )
    print()
    for line in table(rows):
        print(line)
    costs = [r["cost_per_test_s"] for r in rows if r.get("cost_per_test_s")]
    if costs:
        a = statistics.median(c["A"] for c in costs)
        b = statistics.median(c["B"] for c in costs)
        walls = [r["wall_per_test_s"] for r in rows if r.get("wall_per_test_s")]
        wall = f"{statistics.median(walls):.1f} s of A/B wall time, " if walls else ""
        print(f"A/B cost per test (median over runs): {wall}workers measuring A {a:.1f} s, B {b:.1f} s")
        procs = [r["processes"] for r in rows if r.get("processes")]
        if procs:
            print("worker processes per run (A+B): " + ", ".join(str(p["A"] + p["B"]) for p in procs))
    for mode in ("ab", "stored"):
        walls = [r["wall_s"] for r in rows if r["mode"] == mode]
        if walls:
            print(f"{mode}: median {statistics.median(walls):.1f} s per pytest run of {args.tests} test(s)")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
