"""Nothing the plugin starts outlives pytest: signal pytest N times per kind and signal, count what survives.

For each kind of plugin-started process (a ``gpuperf_torchrun`` script on 2 ranks, an A/B
run's workers, a replica recording's workers) and each signal (SIGINT to pytest's process
group as Ctrl-C sends it, SIGTERM and SIGKILL to pytest alone), starts pytest on a test that
keeps those processes busy, sends the signal once they are, and records how long until no
process of the run was left (or what was still alive after 5 s). The scenarios are those of
``tests/test_process_cleanup.py`` (``tests/cleanup_harness.py``). Prints a table.

    python benchmarks/bench_cleanup_after_signals.py [--tries 10] [--kinds torchrun ab replica]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cleanup_harness import LIMIT_SECONDS, SCENARIOS, make_project, signal_during_run


def main() -> None:
    """Run the tries and print one row per kind and signal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--kinds", nargs="+", default=sorted(SCENARIOS), choices=sorted(SCENARIOS))
    args = parser.parse_args()
    signals = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    print(f"{'kind':<9} {'signal':<8} {'tries':>5} {'clean':>5} {'busy procs':>10} {'max s to clean':>15}")
    failures = []
    for kind in args.kinds:
        for sig in signals:
            clean, busy, slowest = 0, 0, 0.0
            for _ in range(args.tries):
                with tempfile.TemporaryDirectory() as tmp:
                    root = Path(tmp)
                    make_project(root, SCENARIOS[kind])
                    outcome = signal_during_run(root, SCENARIOS[kind], sig)
                busy = max(busy, outcome.busy)
                slowest = max(slowest, outcome.seconds)
                if outcome.survivors:
                    failures.append(f"{kind} {sig.name}: {outcome.survivors}")
                else:
                    clean += 1
            print(f"{kind:<9} {sig.name:<8} {args.tries:>5} {clean:>5} {busy:>10} {slowest:>15.2f}", flush=True)
    for failure in failures:
        print(f"alive {LIMIT_SECONDS:g} s after the signal: {failure}")


if __name__ == "__main__":
    main()
