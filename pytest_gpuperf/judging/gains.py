"""Improvements decided like regressions: a noisy metric is "improved" only beyond the spread between processes.

A regression is measured again in a fresh process before it fails; an improvement is not, so one fast process would
be enough to report a gain and, through the re-record it suggests, to store that process's number. A noisy metric
(a CUDA step's host overhead, a host-CPU time or throughput: whole processes of unchanged code differ there, the
seed Linear's host overhead by 0.2-2.3x) therefore counts as improved only when its whole 95% interval lies beyond
the band the baseline's processes spread over (the wider of ``process_spread`` and ``noise_bound``): a process of
unchanged code reads anywhere in that band. Within it the verdict is unchanged, the band shown
(``-64.0% within the spread between the baseline's processes 0.43-2.3x``). A host overhead whose baseline records
no spread (one process, or a file from before host overheads stored one) cannot tell a gain from a faster
process: it reads unchanged, saying how to record one. A host-CPU time recorded from one process keeps its own
rule (its tolerance is the only noise figure it has, and a re-record from one process is asked for explicitly).
"""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.judging.ratio_rule import worse_ratio
from pytest_gpuperf.results import KIND_HOST, KIND_THROUGHPUT, KIND_TIME, Metric
from pytest_gpuperf.validate import number_or_none

#: Processes a baseline's spread needs to come from for a noisy metric's gain to be judged against it.
MIN_PROCESSES = 2
#: The noise figures a recording stores (:func:`pytest_gpuperf.judging.replication.noise_facts`); the wider decides.
NOISE_FIGURES = ("process_spread", "noise_bound")
#: The key of a metric's ``extra`` that keeps why its gain was not counted (the reports show it).
WITHIN_SPREAD = "within_spread"


def noisy(metric: Metric) -> bool:
    """True for a metric whose processes differ more than its samples say: a host overhead, a host-CPU timing
    (a time or throughput that carries the host calibration)."""
    if metric.kind == KIND_HOST:
        return True
    return metric.kind in (KIND_TIME, KIND_THROUGHPUT) and number_or_none(metric.extra.get("calibration")) is not None


def spread_band(metric: Metric, entry: dict[str, Any]) -> tuple[float, int] | None:
    """The band the baseline's processes (and this recording's, when it merged several) spread over, and how many
    processes the baseline was recorded from; None when it records no spread from :data:`MIN_PROCESSES`."""
    processes = int(number_or_none(entry.get("processes")) or 1)
    if processes < MIN_PROCESSES or number_or_none(entry.get("process_spread")) is None:
        return None
    figures = [number_or_none(facts.get(key)) for facts in (entry, metric.extra) for key in NOISE_FIGURES]
    return max(f for f in figures if f is not None and f >= 0), processes


def gain_doubt(metric: Metric, entry: dict[str, Any], ci: tuple[float, float]) -> str | None:
    """Why an improvement of a noisy ``metric`` (its ratio's 95% interval ``ci``) is no evidence, or None."""
    if not noisy(metric):
        return None
    found = spread_band(metric, entry)
    if found is None:
        if metric.kind != KIND_HOST:
            return None  # a host-CPU timing recorded from one process: its own rule (module doc)
        return (
            "its baseline records no spread between processes, so a gain cannot be told from a faster process; "
            "to judge gains, re-record every entry of the test from 3 processes (--gpuperf-update "
            "-o gpuperf_update_all=true -o gpuperf_processes=3)"
        )
    band, processes = found
    least = max(worse_ratio(c, metric.better) for c in ci)  # the interval's end that gained least
    if least < 1.0 / (1.0 + band):
        return None
    return f"within the spread between the baseline's {processes} processes {1.0 / (1.0 + band):.2g}-{1.0 + band:.2g}x"
