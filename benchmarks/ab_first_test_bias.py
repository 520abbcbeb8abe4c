"""Is the first test an A/B worker process measures biased? Reads ``bench_ab.py --out`` files and prints a table.

Each test's value in one worker is divided by that test's median over all of the run's workers (both sides), which
removes the tests' own differences; the ratios are then grouped by the test's place in its worker: the first test
it measured, or a later one (workers of the round pairs for undecided tests run few tests: nearly all first).
For a throughput, a ratio above 1 is a fast reading.

    python benchmarks/ab_first_test_bias.py /path/to/ab10.json [more.json ...]
    python benchmarks/ab_first_test_bias.py --logs docs/data/r9/tests_call1.jsonl   # bench_ab.py --log-tests lines

With ``--logs`` it reads the per-test lines instead (one per perf test of every worker process, their ``run`` field
naming the bench run) and adds what the timing record says of the GPU's state at each place: the power its warm-up
settled at and the SM clock of its samples.
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


def logged_places(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``bench_ab.py --log-tests`` lines of every measuring process (A/B workers, stored runs) by place in it."""
    measured = [line for line in lines if line.get("duration", 0) > 0 and line.get("extra")]
    medians: dict[tuple[str, str], list[float]] = {}
    for line in measured:
        medians.setdefault((line.get("run", ""), line["nodeid"]), []).append(line["value"])
    seen: set[tuple[str, int]] = set()
    grouped: dict[str, list[dict[str, Any]]] = {"first test": [], "later tests": []}
    for line in measured:
        process = (line.get("run", ""), line["pid"])
        place = "later tests" if process in seen else "first test"
        seen.add(process)
        ratio = line["value"] / statistics.median(medians[(line.get("run", ""), line["nodeid"])])
        grouped[place].append({"ratio": ratio, **line["extra"]})
    return grouped


def print_logged(paths: list[Path]) -> None:
    """The table of :func:`logged_places` for JSON-lines files."""
    lines = [json.loads(row) for path in paths for row in path.read_text(encoding="utf-8").splitlines() if row]
    print("value / the test's median in its run; power its warm-up settled at; SM clock of its samples (medians)")
    print(f"{'place in its worker':<22} {'n':>4} {'ratio':>7} {'> +4%':>6} {'power W':>8} {'min W':>6} {'MHz':>6}")
    for place, rows in logged_places(lines).items():
        if not rows:
            continue
        power = [r["sustained_power_w"] for r in rows if isinstance(r.get("sustained_power_w"), (int, float))]
        clock = [r["sm_clock_mhz"] for r in rows if isinstance(r.get("sm_clock_mhz"), (int, float))]
        ratio = statistics.median(r["ratio"] for r in rows)
        share = sum(r["ratio"] > 1.04 for r in rows) / len(rows)
        print(
            f"{place:<22} {len(rows):>4} {ratio:>7.3f} {share:>6.0%} {statistics.median(power):>8.1f} "
            f"{min(power):>6.0f} {statistics.median(clock):>6.0f}"
        )


def main() -> None:
    """Print the table for the given files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--logs", action="store_true", help="the files are bench_ab.py --log-tests lines")
    args = parser.parse_args()
    if args.logs:
        print_logged(args.files)
        return
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
