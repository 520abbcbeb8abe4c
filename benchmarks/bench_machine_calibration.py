"""Baselines that travel (issue 21 item 1): another machine is inconclusive, a real 1.5x slowdown here still fails.

Writes the perf suite's CPU matmul test (``perf_tests/test_seed_kernels.py::test_large_matmul_compute_side``:
1024 x 1024 fp32 on one thread, the same declared ``flops=`` / ``bytes_moved=``) to a temporary project,
records its baseline once with the plugin's defaults (``--gpuperf-update``: 3 processes, the host CPU's
calibration stored with each timing entry), then runs fresh ``pytest --gpuperf`` processes against it:

* ``unchanged``: the same code on the machine that recorded;
* ``1.5x work``: the step also multiplies half of ``a`` by ``b`` (1.5x the FLOPs in the same kernel), its
  declared work unchanged: the same declared work got 1.5x slower, on the machine that recorded;
* ``2x slower machine``: unchanged code judged against the baseline rewritten as a machine twice as fast
  would have recorded it (every time value and sample and the stored calibration halved, throughputs
  doubled). This is a simulation by editing the recorded file: a CPU quota or a process pinned to the same
  core does not slow the thread CPU time the CPU backend judges (nor the calibration's), and no slower
  machine was at hand;
* ``2x slower machine, no calibration``: the same, with the calibration fields removed (a baseline from an
  older pytest-gpuperf): what the calibration prevents.

    python benchmarks/bench_machine_calibration.py --runs 4

Prints one row per scenario: runs, how many failed / were inconclusive / passed as judged, what the time
verdicts' doubts were, and this machine's calibration over the recorded one (range over the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEST = '''
import os

import torch

torch.set_num_threads(1)
SLOWER = os.environ.get("BENCH_SLOWER") == "1"


def test_large_matmul_compute_side(gpuperf):
    """The perf suite's CPU matmul (n 1024, fp32), optionally with half a matmul more of undeclared work."""
    n = 1024
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    half = a[: n // 2]

    def step():
        out = a @ b
        if SLOWER:
            half @ b  # 1.5x the FLOPs of the step, in the same kernel
        return out

    gpuperf.measure(step, flops=2 * n**3, bytes_moved=3 * n * n * a.element_size())
'''
NODE = "test_mm.py::test_large_matmul_compute_side[cpu]"
TIMING_KINDS = ("time", "throughput")


def pytest_run(project: Path, *args: str, slower: bool = False) -> dict[str, Any]:
    """One fresh ``pytest --gpuperf`` process in ``project``; its JSON report."""
    env = {**os.environ, "BENCH_SLOWER": "1" if slower else "0", "PYTHONPATH": str(ROOT)}
    report = project / "report.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-q", "--gpuperf", "--gpuperf-json", str(report)]
    subprocess.run([*command, *args, "test_mm.py"], cwd=project, env=env, capture_output=True, text=True, check=False)
    return json.loads(report.read_text())


def scale_baseline(path: Path, factor: float, keep_calibration: bool) -> None:
    """Rewrite the baseline as a machine ``factor`` times as fast would have recorded it (times x 1/factor)."""
    import yaml

    doc = yaml.safe_load(path.read_text())
    for entry in doc["tests"][NODE].values():
        kind = entry.get("kind")
        if kind == "time":
            entry["value"] /= factor
            entry["samples"] = [s / factor for s in entry.get("samples", [])]
        elif kind == "throughput":
            entry["value"] *= factor
            entry["samples"] = [s * factor for s in entry.get("samples", [])]
        if kind in TIMING_KINDS:
            if keep_calibration and "calibration" in entry:
                entry["calibration"] /= factor
            elif not keep_calibration:
                entry.pop("calibration", None)
                entry.pop("calibration_spread", None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def timing_verdict(report: dict[str, Any]) -> dict[str, Any]:
    """The judged time verdict of the test (its status, doubt and calibration)."""
    [test] = [t for t in report["gpuperf"]["tests"] if t["nodeid"] == NODE]
    judged = [m for m in test["metrics"] if m["kind"] in TIMING_KINDS and m["status"] != "info"]
    return judged[0]


def main() -> None:
    """Record once, run the scenarios, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="fresh pytest processes per scenario")
    args = parser.parse_args()
    import yaml

    with open("/proc/loadavg", encoding="utf-8") as handle:
        print(f"load average at start: {handle.read().split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_mm.py").write_text(TEST)
        (project / "pytest.ini").write_text("[pytest]\n")
        pytest_run(project, "--gpuperf-update")
        [baseline] = (project / "baselines").glob("cpu-*.yaml")
        recorded = baseline.read_text()
        entry = yaml.safe_load(recorded)["tests"][NODE]["step.time"]
        print(
            f"recorded: time {entry['value'] * 1e3:.2f} ms, calibration {entry.get('calibration', 0) * 1e6:.1f} us, "
            f"spread between its {entry.get('processes', 1)} processes {entry.get('process_spread', 0):.1%}"
        )
        scenarios = [
            ("unchanged, machine that recorded", False, None),
            ("1.5x work, machine that recorded", True, None),
            ("unchanged, 2x slower machine (simulated)", False, ("scale", True)),
            ("unchanged, 2x slower machine, no calibration", False, ("scale", False)),
        ]
        rows = []
        for name, slower, edit in scenarios:
            baseline.write_text(recorded)
            if edit is not None:
                scale_baseline(baseline, 2.0, keep_calibration=edit[1])
            base_cal = yaml.safe_load(baseline.read_text())["tests"][NODE]["step.time"].get("calibration")
            outcomes, doubts, ratios, changes = Counter[str](), Counter[str](), [], []
            for _ in range(args.runs):
                verdict = timing_verdict(pytest_run(project, slower=slower))
                status = verdict["status"]
                outcomes["failed" if status == "regression" else status] += 1
                if verdict.get("doubt"):
                    doubts[verdict["doubt"]] += 1
                run_cal = (verdict.get("extra") or {}).get("calibration")
                if run_cal and base_cal:
                    ratios.append(run_cal / base_cal)
                if verdict.get("ratio"):
                    changes.append(verdict["ratio"] - 1.0)
            rows.append(
                (
                    name,
                    str(args.runs),
                    str(outcomes["failed"]),
                    str(outcomes["inconclusive"]),
                    str(outcomes["unchanged"] + outcomes["improvement"]),
                    ", ".join(f"{k} {v}" for k, v in sorted(doubts.items())) or "-",
                    f"{min(changes):+.0%}..{max(changes):+.0%}" if changes else "-",
                    f"{min(ratios):.2f}..{max(ratios):.2f}" if ratios else "-",
                )
            )
    header = ("scenario", "runs", "failed", "inconclusive", "passed", "doubts", "time change", "calibration ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
