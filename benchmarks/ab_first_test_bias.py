"""Is the first test an A/B worker process measures biased? Reads ``bench_ab.py --out`` files and prints a table.

Each test's value in one worker is divided by that test's median over all of the run's workers (both sides), which
removes the tests' own differences; the ratios are then grouped by the test's place in its worker: the first test
it measured, or a later one (workers of the round pairs for undecided tests run few tests: nearly all first).
For a throughput, a ratio above 1 is a fast reading.

    python benchmarks/ab_first_test_bias.py /path/to/ab10.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def placed_ratios(run: dict[str, Any]) -> list[tuple[str, float]]:
    """(place, value / the test's median over the run's workers) for every test every worker of ``run`` measured."""
    tests = run.get("tests") or {}
    out = []
    for worker in run.get("workers") or []:
        side_values = "a_values" if worker["side"] == "A" else "b_values"
        order = [n for n in worker.get("call_s", {}) if n in tests]
        measured = []
        for nodeid in order:
            values = tests[nodeid].get(side_values) or []
            if worker["pair"] < len(values) and isinstance(values[worker["pair"]], (int, float)):
                everyone = [v for v in tests[nodeid]["a_values"] + tests[nodeid]["b_values"] if isinstance(v, float)]
                measured.append(values[worker["pair"]] / statistics.median(everyone))
        out += [("first test" if index == 0 else "later tests", ratio) for index, ratio in enumerate(measured)]
    return out


def main() -> None:
    """Print the table for the given files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    grouped: dict[str, list[float]] = {}
    runs = 0
    for path in args.files:
        for run in json.loads(path.read_text(encoding="utf-8")):
            if run.get("mode") == "ab" and run.get("workers"):
                runs += 1
                for place, ratio in placed_ratios(run):
                    grouped.setdefault(place, []).append(ratio)
    print(f"{runs} A/B run(s); value / the test's median over the run's workers")
    print(f"{'place in its worker':<26} {'n':>4} {'median':>7} {'p90':>7} {'max':>7} {'> +4%':>6}")
    for place in ("first test", "later tests"):
        ratios = sorted(grouped.get(place, []))
        if ratios:
            p90 = ratios[int(0.9 * (len(ratios) - 1))]
            share = sum(r > 1.04 for r in ratios) / len(ratios)
            middle = statistics.median(ratios)
            print(f"{place:<26} {len(ratios):>4} {middle:>7.3f} {p90:>7.3f} {ratios[-1]:>7.3f} {share:>6.0%}")


if __name__ == "__main__":
    main()
