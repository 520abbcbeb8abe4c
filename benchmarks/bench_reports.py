"""What writing the CI reports costs at the end of a ``--gpuperf`` run.

Builds N perf-test records shaped like the session's report payload (100 time samples,
a FLOP rate and an arithmetic intensity per test, 1 in 10 regressed, 1 in 10 improved)
and times the real report code: the JSON document (pytest-benchmark stats included)
built and written, the Markdown summary, and the roofline PNG. Best of ``--rounds``.
Prints a table.

    python benchmarks/bench_reports.py [--rounds 3] [--tests 10 100 500]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gpuperf.reporting.json_report import build_report, write_json
from pytest_gpuperf.reporting.markdown import render_markdown
from pytest_gpuperf.reporting.plot import write_rooflines
from pytest_gpuperf.reporting.records import TestRecord

FINGERPRINT = {"backend": "cuda", "device_name": "NVIDIA H200", "arch": "sm_90", "memory_gib": 140, "world_size": 1}


def _verdict(metric: str, value: float, unit: str, status: str = "info", **more: Any) -> dict[str, Any]:
    base = {"metric": metric, "label": metric, "value": value, "unit": unit, "better": "lower", "kind": "custom"}
    base |= {"status": status, "baseline": None, "ratio": None, "ci": None, "tolerance": None, "message": ""}
    base |= {"samples": 0, "sample_values": [], "extra": {}}
    return base | more


def make_record(i: int, rng: random.Random) -> TestRecord:
    """One synthetic perf test with realistic payload sizes."""
    samples = [1e-3 * (1 + rng.random() * 0.02) for _ in range(100)]
    status = rng.choice(["unchanged"] * 8 + ["regression", "improvement"])
    extra = {"peak_flops": 7e14, "peak_bandwidth": 4.3e12, "dtype_class": "bfloat16", "iters_per_sample": 4}
    verdicts = [
        _verdict(
            "step.time", samples[50], "s", status, kind="time", baseline=1e-3, ratio=1.01, ci=[1.0, 1.02],
            tolerance=0.05, samples=100, sample_values=samples, extra=extra,
        ),
        _verdict("step.flop_rate", 10 ** rng.uniform(11, 14.5), "FLOP/s"),
        _verdict("step.arithmetic_intensity", 10 ** rng.uniform(-1, 3), "FLOP/B"),
    ]  # fmt: skip
    payload = {"verdicts": verdicts, "fingerprint": FINGERPRINT, "baseline_file": "baselines/x.yaml"}
    return TestRecord(f"perf/test_x.py::test_{i}[cuda]", "passed", 1.0, payload)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tests", type=int, nargs="+", default=[10, 100, 500])
    args = parser.parse_args()
    rng = random.Random(0)
    write_rooflines([make_record(0, rng)], Path(tempfile.mkdtemp()), Path("."), "warm-up")  # matplotlib import
    print("| perf tests | JSON build + write (ms) | JSON size (kB) | Markdown (ms) | roofline PNG (ms) |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.tests:
        records = [make_record(i, rng) for i in range(n)]
        best = [float("inf")] * 3
        for _ in range(args.rounds):
            folder = Path(tempfile.mkdtemp())
            t0 = time.perf_counter()
            document = build_report(records, folder)
            write_json(folder / "r.json", document)
            t1 = time.perf_counter()
            render_markdown(document, records, env={})
            t2 = time.perf_counter()
            write_rooflines(records, folder, folder, f"{n} tests")
            t3 = time.perf_counter()
            best = [min(b, t) for b, t in zip(best, (t1 - t0, t2 - t1, t3 - t2), strict=True)]
        size = (folder / "r.json").stat().st_size / 1e3
        print(f"| {n} | {best[0] * 1e3:.0f} | {size:.0f} | {best[1] * 1e3:.1f} | {best[2] * 1e3:.0f} |")


if __name__ == "__main__":
    main()
