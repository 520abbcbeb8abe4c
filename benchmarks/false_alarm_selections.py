"""Unchanged CPU code judged over whole-file and single-test selections (issue 35): failed, inconclusive, decided.

``bench_false_alarms.py --selections N`` runs this: a three-test file (a ~4 us elementwise step, a Linear forward
judged by throughput, a small MLP step) is recorded as a whole with the plugin's defaults (3 processes), then judged
``N`` times, each in a fresh pytest process, cycling through the whole file and each test alone by node id (4 whole
and 6 single runs in every 10), re-recorded every ``--rerecord-every`` runs
(``--work 2``: judged code doing twice the work, every run should fail). Every run's JSON report is read; a run
fails when pytest exits non-zero or any verdict is a regression. Prints one line per run and a table: runs, failed
runs, and the time/throughput verdicts that were decided (ok, improved, regression) or inconclusive, by doubt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

THREE_TESTS = r'''
"""The issue-35 file: whole processes land in a fast or a slow state; BENCH_WORK multiplies the work."""
import os

import torch

REPEAT = int(os.environ.get("BENCH_WORK", "1"))


def test_tiny(gpuperf):
    x = torch.randn(1024)

    def step():
        for _ in range(REPEAT):
            out = (x * 2.0 + 1.0).relu()
        return out

    gpuperf.measure(step)


def test_linear(gpuperf):
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 256 * REPEAT)
    x = torch.randn(32, 256)
    with torch.no_grad():
        gpuperf.measure(lambda: layer(x), items=32, unit="samples")


def test_mlp(gpuperf):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256 * REPEAT), torch.nn.GELU(), torch.nn.Linear(256 * REPEAT, 128))
    x = torch.randn(32, 128)

    def step():
        model(x).pow(2).mean().backward()

    gpuperf.measure(step)
'''

FILE = "test_three.py"
TESTS = ("test_tiny[cpu]", "test_linear[cpu]", "test_mlp[cpu]")
#: One cycle of selections: 4 whole-file runs and 6 single-test runs in every 10.
CYCLE = ("", TESTS[0], TESTS[1], TESTS[2], "", TESTS[0], "", TESTS[1], TESTS[2], "")
DECIDED = ("unchanged", "improvement", "regression")


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def pytest_run(root: Path, args: list[str], env_extra: dict[str, str] | None = None) -> tuple[int, str, float]:
    """One pytest process in ``root``: (exit code, output, wall seconds)."""
    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, "-m", "pytest", "-q", "--gpuperf", "--gpuperf-backend=cpu", "-p", "no:cacheprovider", *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - started


def record(root: Path, logs: Path, index: int) -> dict[str, dict]:
    """Record the three tests as a whole; returns each timing entry's noise facts."""
    import yaml

    code, output, _ = pytest_run(root, [FILE, "--gpuperf-update"])
    (logs / f"record-{index}.log").write_text(output)
    if code != 0:
        raise SystemExit(f"recording failed (exit {code}):\n{output[-3000:]}")
    facts = {}
    for path in (root / "baselines").glob("*.yaml"):
        for test, metrics in (yaml.safe_load(path.read_text()).get("tests") or {}).items():
            for name, entry in metrics.items():
                if entry.get("kind") in ("time", "throughput"):
                    keep = ("value", "process_spread", "calibration", "calibration_spread", "state_band")
                    facts[f"{test}::{name}"] = {k: entry[k] for k in keep if k in entry}
    return facts


def judge(root: Path, selection: str, report: Path, env_extra: dict[str, str] | None = None) -> tuple[int, list[dict]]:
    """Judge one selection; (exit code, the timing metrics of its JSON report)."""
    target = f"{FILE}::{selection}" if selection else FILE
    code, output, _ = pytest_run(root, [target, "--gpuperf-json", str(report)], env_extra)
    if not report.exists():
        raise SystemExit(f"no JSON report (exit {code}):\n{output[-3000:]}")
    rows = []
    for test in json.loads(report.read_text())["gpuperf"]["tests"]:
        for metric in test["metrics"]:
            if metric["kind"] in ("time", "throughput") and metric["status"] != "info":
                extra = {k: v for k, v in (metric.get("extra") or {}).items() if isinstance(v, (int, float, str, bool))}
                rows.append(
                    {
                        "test": test["nodeid"],
                        **{k: metric.get(k) for k in ("metric", "status", "ratio", "doubt")},
                        "extra": extra,
                    }
                )
    report.unlink()
    return code, rows


def run(root: Path, out: Path, runs: int, rerecord_every: int, deadline: float, work: int = 1) -> str:
    """Record, judge ``runs`` selections (re-recording every ``rerecord_every``), print and return the table."""
    (root / FILE).write_text(THREE_TESTS)
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started, loads = time.perf_counter(), [load()]
    tally: Counter[str] = Counter()
    failed_runs, done = [], 0
    env = {"BENCH_WORK": str(work)}
    with open(out / "selections.jsonl", "w", encoding="utf-8") as sink:
        for index in range(runs):
            if deadline and time.perf_counter() - started > deadline:
                print(f"deadline: runs {index + 1}.. skipped", flush=True)
                break
            if index % rerecord_every == 0:
                facts = record(root, logs, index)
                sink.write(json.dumps({"recorded": facts, "load": load()}) + "\n")
            selection = CYCLE[index % len(CYCLE)]
            code, rows = judge(root, selection, out / "report.json", env)
            done += 1
            statuses = Counter(r["status"] for r in rows)
            tally.update(r["status"] if r["status"] != "inconclusive" else f"inconclusive ({r['doubt']})" for r in rows)
            bad = code != 0 or statuses["regression"] > 0
            if bad:
                failed_runs.append(f"run {index + 1} ({selection or 'whole'}): exit {code}")
            sink.write(
                json.dumps({"run": index, "selection": selection, "exit": code, "rows": rows, "load": load()}) + "\n"
            )
            shown = ", ".join(
                f"{r['test'].split('::')[-1]} {r['metric']} {r['status']} {r['ratio'] or 0:.2f}" for r in rows
            )
            print(
                f"[{time.perf_counter() - started:5.0f} s] run {index + 1} {selection or 'whole'}: "
                f"exit {code}; {shown}",
                flush=True,
            )
    loads.append(load())
    return table(done, failed_runs, tally, loads, work)


def table(done: int, failed_runs: list[str], tally: Counter[str], loads: list[str], work: int) -> str:
    """The summary: runs, failed runs, verdicts decided and inconclusive (by doubt), the load averages."""
    total = sum(tally.values())
    decided = sum(tally[s] for s in DECIDED)
    what = f"code doing {work}x the work" if work != 1 else "unchanged code"
    lines = [
        f"{what}, CPU backend, whole-file and single-test selections: {done} runs, "
        f"load average {loads[0]} -> {loads[-1]}",
        f"failed runs: {len(failed_runs)} of {done}" + (f" ({'; '.join(failed_runs)})" if failed_runs else ""),
        f"time/throughput verdicts: {total}; decided {decided} ({decided / max(1, total):.0%}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())),
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    return text
