"""Quality of ``gpuperf history``'s change points on synthetic series (prints one table).

Series of normal noise in the log (``--noise``, the spread recorded between processes), at lengths 12 and 24:
flat (every change point found is a false alarm), one step of 3x the noise at a random commit (found when a
change point lies within 1 commit of it), two steps, and a slow ramp of half the noise per commit (no single
step: what drift is for).

    python benchmarks/bench_changepoints.py --series 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pytest_gpuperf.history.changepoints import DEFAULT_ALPHA, find_change_points


def _flat(rng: np.random.Generator, n: int, noise: float) -> np.ndarray:
    return np.exp(noise * rng.standard_normal(n))


def _case(kind: str, rng: np.random.Generator, n: int, noise: float) -> tuple[np.ndarray, list[int]]:
    """A series and the indices where its true steps start."""
    values = _flat(rng, n, noise)
    if kind == "flat":
        return values, []
    if kind == "step 3x":
        at = int(rng.integers(4, n - 3))
        values[at:] *= np.exp(3 * noise)
        return values, [at]
    if kind == "two steps 4x":
        first = int(rng.integers(4, n // 2 - 1))
        second = int(rng.integers(first + 4, n - 3))
        values[first:] *= np.exp(4 * noise)
        values[second:] *= np.exp(-4 * noise)
        return values, [first, second]
    ramp = np.exp(0.5 * noise * np.arange(n))
    return values * ramp, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100, help="series per case")
    parser.add_argument("--noise", type=float, default=0.03, help="noise (fraction, 1 sigma)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(f"alpha {args.alpha}, noise {args.noise:.1%}, {args.series} series per row")
    print(f"{'case':14} {'n':>3} {'any found':>10} {'all found +-1':>14} {'false pts':>10} {'ms/series':>10}")
    for kind in ("flat", "step 3x", "two steps 4x", "ramp 0.5x/commit"):
        for n in (12, 24):
            if kind == "two steps 4x" and n < 20:
                continue
            found_any = found_all = false_points = 0
            started = time.perf_counter()
            for _ in range(args.series):
                values, truth = _case(kind, rng, n, args.noise)
                points = [p.index for p in find_change_points(values, alpha=args.alpha)]
                found_any += bool(points)
                hits = [t for t in truth if any(abs(p - t) <= 1 for p in points)]
                found_all += bool(truth) and len(hits) == len(truth)
                false_points += sum(1 for p in points if all(abs(p - t) > 1 for t in truth))
            elapsed = (time.perf_counter() - started) / args.series * 1e3
            all_cell = f"{found_all / args.series:.0%}" if kind not in ("flat", "ramp 0.5x/commit") else "-"
            print(f"{kind:14} {n:>3} {found_any / args.series:>10.0%} {all_cell:>14} {false_points:>10} "
                  f"{elapsed:>10.1f}")


if __name__ == "__main__":
    main()
