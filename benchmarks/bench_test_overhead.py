"""What a perf test costs beyond its measuring loop (issue 14: first test <= 2 s, later tests <= 0.3 s).

Writes a project of ``--tests`` perf tests (CPU: a 256^2 matmul chain; CUDA: a 4096^2 bf16 GEMM), then runs
``pytest --gpuperf`` in fresh processes, twice: with an empty pytest cache (roofs measured in this run) and with
the cache the first run left (roofs read back). A conftest in the project records, per test, the call phase's
wall time (pytest's report duration) and the time spent inside ``measure_time`` (warm-up + sampling loop, from
``TimingResult.elapsed``). CUDA's own initialisation is done in ``pytest_sessionstart`` so it is not in any test.

    python benchmarks/bench_test_overhead.py --device cpu
    python benchmarks/bench_test_overhead.py --device cuda      # on the GPU machine
    python benchmarks/bench_test_overhead.py --device cpu --profile /tmp/prof   # + cProfile of each first test

Where the first test's seconds go is printed too: inclusive perf_counter spans of the plugin's own steps
(``benchmarks/overhead_probe.py``: fixture set-up, baseline lookup, memory pass, loop, counting, roofs, judging).

Overhead = call wall time - measuring loop: baseline lookup, the peak-memory pass, the analytic (FLOP/byte)
pass, roofs, judging and reporting. Printed per test position, median over ``--repeats`` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = r"""
import json, os, time
import pytest
import pytest_gpuperf.timing as timing

LOOPS = {}
CALLS = {}
_current = [None]
_original = timing.measure_time


def _timed(*args, **kwargs):
    result = _original(*args, **kwargs)
    LOOPS[_current[0]] = LOOPS.get(_current[0], 0.0) + result.elapsed
    return result


timing.measure_time = _timed  # the fixture imports it at each call: this is the one it gets


def pytest_sessionstart(session):
    if os.environ.get("BENCH_DEVICE") == "cuda":
        import torch
        torch.ones(1, device="cuda").sum().item()  # CUDA's own initialisation, outside every test


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _current[0] = item.nodeid


def pytest_runtest_logreport(report):
    if report.when == "call":
        CALLS[report.nodeid] = report.duration


def pytest_sessionfinish(session):
    out = os.environ["BENCH_OUT"]
    with open(out, "w") as fh:
        json.dump({"calls": CALLS, "loops": LOOPS}, fh)
"""

TESTS = r"""
import os
import pytest
import torch

DEVICE = os.environ["BENCH_DEVICE"]


@pytest.mark.parametrize("i", range({tests}))
def test_step(gpuperf, i):
    gen = torch.Generator(device=str(gpuperf.device)).manual_seed(i)
    if DEVICE == "cuda":
        a = torch.randn(4096, 4096, generator=gen, device=gpuperf.device, dtype=torch.bfloat16)
        gpuperf.measure(lambda: a @ a, flops=2 * 4096**3)
    else:
        a = torch.randn(256, 256, generator=gen)
        gpuperf.measure(lambda: torch.tanh(a @ a) @ a)
"""


#: Spans of the first test, keyed by case, summed over the repeats (divided at the end).
FIRST_SPANS: dict[str, list[dict[str, float]]] = {}


def run(
    project: Path, device: str, cache: bool, extra: list[str], case: str = "", profile: Path | None = None
) -> tuple[list[float], list[float], float]:
    """One fresh pytest process: per-test call seconds and loop seconds (in test order), and its wall time."""
    out = project / "times.json"
    probe = project / "probe.json"
    env = {
        **os.environ,
        "BENCH_DEVICE": device,
        "BENCH_OUT": str(out),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]),
        "OVERHEAD_PROBE_OUT": str(probe),
    }
    if profile is not None:
        env["OVERHEAD_PROBE_PROFILE"] = str(profile)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "overhead_probe"]
    command += ["--gpuperf", "--gpuperf-backend", device]
    command += [] if cache else ["-p", "no:cacheprovider"]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, *extra, "test_overhead.py"], cwd=project, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"pytest failed (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    ids = list(data["calls"])
    spans = json.loads(probe.read_text())
    first = ids[0]
    phases = spans["phases"].get(first, {})
    FIRST_SPANS.setdefault(case, []).append(
        {**spans["spans"].get(first, {}), "(setup phase)": phases.get("setup", 0.0), "(call phase)": phases["call"]}
    )
    return [data["calls"][i] for i in ids], [data["loops"].get(i, 0.0) for i in ids], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tests", type=int, default=4, help="perf tests per process")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--profile", metavar="DIR", help="write cProfile stats of each case's first test here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest flags (after --)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        project = Path(tmp)
        (project / "conftest.py").write_text(CONFTEST)
        (project / "test_overhead.py").write_text(TESTS.format(tests=opts.tests))
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--gpuperf-update", "--gpuperf-backend", opts.device,
             "-p", "no:cacheprovider", "test_overhead.py"],
            cwd=project, env={**os.environ, "BENCH_DEVICE": opts.device, "BENCH_OUT": str(project / "r.json"),
                              "PYTHONPATH": str(ROOT)}, capture_output=True, check=False,
        )  # fmt: skip
        rows: dict[str, list[tuple[list[float], list[float], float]]] = {"no cached roofs": [], "cached roofs": []}
        profiles = Path(opts.profile) if opts.profile else None
        if profiles is not None:
            profiles.mkdir(parents=True, exist_ok=True)
        for repeat in range(opts.repeats):
            shutil.rmtree(project / ".pytest_cache", ignore_errors=True)
            for case, slug in (("no cached roofs", "empty-cache"), ("cached roofs", "cached")):
                where = profiles / f"first-test-{slug}-{repeat}.prof" if profiles is not None else None
                rows[case].append(run(project, opts.device, True, opts.pytest_args, case, where))
    print(f"device {opts.device}, {opts.tests} tests per process, median of {opts.repeats} fresh processes")
    print(f"{'case':16} {'test':>4} {'call s':>8} {'loop s':>8} {'beyond loop s':>14} {'goal':>6}")
    for case, runs in rows.items():
        for position in range(opts.tests):
            calls = [r[0][position] for r in runs]
            loops = [r[1][position] for r in runs]
            beyond = [c - loop for c, loop in zip(calls, loops, strict=True)]
            goal = 2.0 if position == 0 else 0.3
            print(
                f"{case:16} {position + 1:4d} {statistics.median(calls):8.3f} {statistics.median(loops):8.3f} "
                f"{statistics.median(beyond):14.3f} {'<=' + format(goal, 'g'):>6}"
                f"{'' if statistics.median(beyond) <= goal else '  OVER'}"
            )
        print(f"{case:16} process wall {statistics.median(r[2] for r in runs):.2f} s")
    print_spans()


def print_spans() -> None:
    """The first test's spans per case (median of the repeats; an indented span is inside the one above)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from overhead_probe import SPANS

    labels = ["(setup phase)", "(call phase)", *dict.fromkeys(label for label, _ in SPANS)]
    cases = list(FIRST_SPANS)
    print()
    print("first test, seconds per span (median of the processes; indented spans are inside the one above)")
    print(f"{'span':28}" + "".join(f"{case:>18}" for case in cases))
    for label in labels:
        values = [statistics.median(s.get(label, 0.0) for s in FIRST_SPANS[case]) for case in cases]
        if any(v > 0.0005 for v in values):
            print(f"{label:28}" + "".join(f"{v:18.3f}" for v in values))


if __name__ == "__main__":
    main()
