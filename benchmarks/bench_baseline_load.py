"""How long reading and updating a baseline file takes, by the number of tests it holds.

Writes a realistic baseline file (per test: time with 30 samples, a throughput
whose samples are derived from the time's, peak memory, the bound category, an
arithmetic intensity, a FLOP rate and a bandwidth), then times the real code:
``load_baseline_file`` (strict parse, validate, line numbers; uncached) and ``update_baseline_file``
of one test under the lock (read, merge, render, atomic write). Best of ``--rounds``.
Prints a table.

    python benchmarks/bench_baseline_load.py [--rounds 5] [--tests 10 100 1000] [--no-libyaml]

``--no-libyaml`` reads with PyYAML's pure-Python loader, as on an install without libyaml.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_gpuperf.baselines import BaselineFile, load_baseline_file, render_baseline, update_baseline_file

FINGERPRINT = {"backend": "cuda", "device_name": "NVIDIA H200", "arch": "sm_90", "memory_gib": 140, "world_size": 1}


def make_entries(i: int, rng: random.Random) -> dict[str, dict[str, Any]]:
    """The metrics one perf test records."""
    typical = 1e-4 * (1 + i % 17)
    samples = sorted(typical * (1 + rng.random() * 0.05) for _ in range(30))
    time_entry = {"value": typical, "unit": "s", "better": "lower", "kind": "time", "samples": samples}
    return {
        "step.time": {**time_entry, "method": "events"},
        "step.throughput": {"value": 1024 / typical, "unit": "samples/s", "better": "higher", "kind": "throughput"},
        "step.peak_memory": {"value": 4096 * (i + 1), "unit": "B", "better": "lower", "kind": "memory"},
        "step.bound": {"value": "compute-bound", "unit": "", "better": "equal", "kind": "category"},
        "step.arithmetic_intensity": {"value": 170.7, "unit": "FLOP/B", "better": "equal", "kind": "custom"},
        "step.flop_rate": {"value": 1e12 / typical, "unit": "FLOP/s", "better": "higher", "kind": "custom"},
        "step.bandwidth": {"value": 1e9 / typical, "unit": "B/s", "better": "higher", "kind": "custom"},
    }


def best_of(rounds: int, action: Any) -> tuple[float, float]:
    """Shortest wall time and shortest CPU time of ``rounds`` calls of ``action``.

    The CPU time (``time.process_time``) is what the call costs on a machine to itself; on a shared
    runner the wall time adds the waits for a core.
    """
    wall = cpu = float("inf")
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        action()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    """Print the load/update table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tests", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--no-libyaml", action="store_true", help="read with the pure-Python loader")
    args = parser.parse_args()
    import yaml

    if args.no_libyaml and hasattr(yaml, "CSafeLoader"):
        del yaml.CSafeLoader

    rng = random.Random(0)
    print(f"libyaml: {'yes' if hasattr(yaml, 'CSafeLoader') else 'no'}, best of {args.rounds}")
    print(f"{'tests':>6} {'file KiB':>9} {'load ms':>9} {'load cpu ms':>12} {'update ms':>10} {'update cpu ms':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.tests:
            tests = {f"perf_tests/test_model.py::test_case_{i}[cuda]": make_entries(i, rng) for i in range(n)}
            path = Path(tmp) / f"cuda-{n}.yaml"
            path.write_text(render_baseline(BaselineFile(path, dict(FINGERPRINT), tests)), encoding="utf-8")
            loaded = load_baseline_file(path)
            assert loaded is not None and len(loaded.tests) == n
            load = best_of(args.rounds, lambda path=path: load_baseline_file(path, cached=False))  # parse each time
            counter = iter(range(10**9))

            def update(path: Path = path, counter: Any = counter) -> None:
                entries = make_entries(next(counter), rng)
                update_baseline_file(path, FINGERPRINT, {"perf_tests/test_model.py::test_case_0[cuda]": entries})

            upd = best_of(args.rounds, update)
            size = path.stat().st_size / 1024
            print(
                f"{n:>6} {size:>9.0f} {load[0] * 1e3:>9.1f} {load[1] * 1e3:>12.1f} "
                f"{upd[0] * 1e3:>10.1f} {upd[1] * 1e3:>14.1f}"
            )


if __name__ == "__main__":
    main()
