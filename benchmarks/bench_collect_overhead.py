"""What pytest-gpuperf costs a test suite when ``--gpuperf`` is off.

Generates a 200-test suite of plain tests (none uses the plugin) and times
``pytest --collect-only -q`` with the plugin loaded (as in any environment where
it is installed) against the same run with it disabled (``-p no:gpuperf``).
The two variants alternate, round after round, so drift of this shared machine
hits both alike; the ratio of medians is the figure. Prints a table.

    python benchmarks/bench_collect_overhead.py [--rounds 15] [--tests 200] [--no-bytecode]

By default bytecode caching is on (``PYTHONDONTWRITEBYTECODE`` removed from the
children's environment), as on a user's machine: the plugin's modules are then
compiled and assertion-rewritten once, not on every run. ``--no-bytecode`` keeps
``PYTHONDONTWRITEBYTECODE=1`` (this project's sandbox sets it), where every run pays
for compiling and rewriting the plugin's modules.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_suite(root: Path, tests: int) -> None:
    """Write ``tests`` plain test functions over 10 modules."""
    per_module = max(1, tests // 10)
    for module in range(10):
        body = "\n".join(f"def test_case_{module}_{i}():\n    assert {i} + 1 > {i}\n" for i in range(per_module))
        (root / f"test_mod_{module}.py").write_text(body)
    (root / "pytest.ini").write_text("[pytest]\n")


def time_run(root: Path, extra: list[str], env: dict[str, str]) -> float:
    """Seconds of one ``pytest --collect-only -q`` process, start-up included."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    return time.perf_counter() - start


def main() -> None:
    """Alternate the two variants and print medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE=1 in the children")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_suite(root, args.tests)
        variants = {"plugin disabled (-p no:gpuperf)": ["-p", "no:gpuperf"], "plugin loaded, --gpuperf off": []}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for extra in variants.values():  # warm the file cache once
            time_run(root, extra, env)
        for _ in range(args.rounds):
            for name, extra in variants.items():
                times[name].append(time_run(root, extra, env))
    base_name, plugin_name = list(variants)
    base, plugin = statistics.median(times[base_name]), statistics.median(times[plugin_name])
    paired = [p / b for p, b in zip(times[plugin_name], times[base_name], strict=True)]
    caching = "off (PYTHONDONTWRITEBYTECODE=1)" if args.no_bytecode else "on"
    print(f"pytest --collect-only of {args.tests} plain tests, {args.rounds} alternating rounds")
    print(f"bytecode cache: {caching}")
    print(f"{'variant':34} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name in variants:
        values = times[name]
        print(f"{name:34} {statistics.median(values):9.3f} {min(values):7.3f} {max(values):7.3f}")
    print(f"ratio of medians (loaded / disabled): {plugin / base:.3f}  -> overhead {100 * (plugin / base - 1):+.1f}%")
    print(f"median of paired ratios: {statistics.median(paired):.3f}")


if __name__ == "__main__":
    main()
