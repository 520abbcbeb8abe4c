"""How long must a measurement on a power-capped GPU last? Read ``gpu/clock_traces.py``'s per-sample traces.

    python3 gpu/trace_windows.py traces.jsonl.gz

For windows of 0.05-1 s after the first second of load it prints, averaged over the processes, the standard
deviation within one process of the window's judged time (the 0.2 quantile of its samples) and of its cycles
(time x the SM clock read around each sample): the noise of one measurement that lasts that long. With two
workloads (``gemm4k:4096,gemm4k:4352``) it also prints, per 0.6-1 s window, how often a 3-process baseline of
the first and one process of the second read past +5% (and the first past +5% against itself).
"""

from __future__ import annotations

import gzip
import itertools
import json
import sys

import numpy as np


def rows_of(rec: dict, lo: float, hi: float) -> np.ndarray:
    return np.array([r for r in rec["rows"] if lo <= r[0] < hi])


def window_noise(recs: list[dict]) -> None:
    print(f"{'window s':>9} {'time sd %':>10} {'cycles sd %':>12}")
    for length in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0):
        sd_t, sd_c = [], []
        for rec in recs:
            rows = rows_of(rec, 1.0, 99.0)
            t, c = rows[:, 1], (rows[:, 2] + rows[:, 6]) / 2
            mt, mc = [], []
            for a in np.arange(1.0, rows[:, 0].max() - length + 1e-9, length):
                m = (rows[:, 0] >= a) & (rows[:, 0] < a + length)
                if m.sum() > 3:
                    mt.append(np.quantile(t[m], 0.2))
                    mc.append(np.median(t[m] * c[m]))
            sd_t.append(np.std(np.log(mt)))
            sd_c.append(np.std(np.log(mc)))
        print(f"{length:9.2f} {np.mean(sd_t) * 100:10.2f} {np.mean(sd_c) * 100:12.2f}")


def detection(recs: list[dict]) -> None:
    names = sorted({r["workload"] for r in recs})
    if len(names) != 2:
        return
    a = [r for r in recs if r["workload"] == names[0]]
    b = [r for r in recs if r["workload"] == names[1]]
    print(f"\n{'window s':>10} {'caught (time)':>14} {'false (time)':>13}  ratios of {names[1]} to {names[0]}")
    for lo, hi in ((1.0, 1.6), (1.5, 2.1), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)):
        qa = [np.quantile(rows_of(r, lo, hi)[:, 1], 0.2) for r in a]
        qb = [np.quantile(rows_of(r, lo, hi)[:, 1], 0.2) for r in b]
        caught = false = n_caught = n_false = 0
        for base in itertools.combinations(range(len(qa)), 3):
            ref = np.median([qa[i] for i in base])
            caught += sum(q / ref > 1.05 for q in qb)
            n_caught += len(qb)
            rest = [qa[i] for i in range(len(qa)) if i not in base]
            false += sum(q / ref > 1.05 for q in rest)
            n_false += len(rest)
        ratios = " ".join(f"{q / np.median(qa):.3f}" for q in qb)
        print(f"{lo:4.1f}-{hi:<4.1f} {caught / n_caught:14.0%} {false:>6}/{n_false:<6}  {ratios}")


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "traces.jsonl.gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        recs = [json.loads(line) for line in fh]
    window_noise(recs)
    detection(recs)


if __name__ == "__main__":
    main()
