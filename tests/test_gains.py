"""Improvements decided like regressions (issue 38): a noisy metric's gain counts only beyond the spread between
the baseline's processes; a recording stores the median process's host overhead with that spread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baselines.fields import entry_problem
from pytest_gpuperf.baselines.recording import Recorder
from pytest_gpuperf.context import build_context
from pytest_gpuperf.judging.compare import judge
from pytest_gpuperf.judging.replication import combine, tolerance_warning
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.reporting.verdict_text import verdict_word
from pytest_gpuperf.results import KIND_HOST, Metric, verdict_to_dict
from pytest_gpuperf.stats import quantile
from tests.test_judging import NODE, FakeBackend, settings
from tests.test_verdicts import entry, samples, time_metric

US = 1e-6


def host(median_us: float, seed: int) -> Metric:
    """A CUDA step's host overhead around ``median_us`` (its samples 2% apart), behind a 480 us eager step."""
    values = samples(median_us * US, seed, spread=0.02)
    return Metric(
        "step.host_overhead", quantile(values, 0.5), "s", "lower", KIND_HOST, values, extra={"abs_slack": 5 * US}
    )


def host_entry(median_us: float, seed: int, **facts: Any) -> dict[str, Any]:
    values = samples(median_us * US, seed, spread=0.02)
    return {"value": quantile(values, 0.5), "unit": "s", "better": "lower", "kind": "host", "samples": values, **facts}


#: The seed Linear's host overhead across unchanged processes: 0.2-2.3x (issue 38).
LINEAR = {"process_spread": 10.5, "processes": 3, "noise_bound": 3.0}


def test_a_host_overhead_gain_within_the_spread_between_processes_is_unchanged_with_the_band_shown() -> None:
    # 301 -> 108 us ("improvement -64%" on unchanged code)
    verdict = judge(host(108, 1), host_entry(301, 2, **LINEAR), 0.25, "H200")
    assert verdict.status == "unchanged" and not verdict.failed
    assert "-64.1%" in verdict.message and "within the spread between the baseline's 3 processes 0.087-12x" in (
        verdict.message
    )
    assert verdict.metric.extra["within_spread"].startswith("within the spread")
    word = verdict_word(verdict_to_dict(verdict))
    assert word == "ok (within the spread between the baseline's 3 processes 0.087-12x)"


def test_a_host_overhead_without_a_recorded_spread_never_reads_as_a_gain() -> None:
    # The committed H200 file's Linear entry: recorded before host overheads stored their spread.
    verdict = judge(host(82.7, 3), host_entry(422, 4), 0.25, "H200")
    assert verdict.status == "unchanged" and "records no spread between processes" in verdict.message
    assert "gpuperf_update_all=true" in verdict.message
    one = judge(host(82.7, 3), host_entry(422, 4, process_spread=0.0, processes=1), 0.25, "H200")
    assert one.status == "unchanged"


def test_a_gain_beyond_the_spread_and_its_own_interval_is_an_improvement() -> None:
    calm = {"process_spread": 0.12, "processes": 3, "noise_bound": 0.1}
    assert judge(host(150, 5), host_entry(300, 6, **calm), 0.25, "H200").status == "improvement"
    # -30% is past the 25% tolerance's improvement limit (-20%) but within a 60% spread (down to 0.625x)
    wide = {"process_spread": 0.6, "processes": 3}
    assert judge(host(210, 7), host_entry(300, 8, **wide), 0.25, "H200").status == "unchanged"


def test_a_host_cpu_time_gain_needs_to_clear_the_spread_a_device_time_keeps_its_rule() -> None:
    base = entry(samples(1.0, 9), process_spread=0.2, processes=3, calibration=4.4e-5)
    faster = time_metric(samples(0.88, 10), calibration=4.4e-5)  # -12%: past 5%, within the 20% spread
    verdict = judge(faster, base, 0.05, "CPU")
    assert verdict.status == "unchanged" and "within the spread between the baseline's 3 processes" in verdict.message
    assert judge(time_metric(samples(0.7, 11), calibration=4.4e-5), base, 0.05, "CPU").status == "improvement"
    one_process = entry(samples(1.0, 9), process_spread=0.0, processes=1, calibration=4.4e-5)
    assert judge(faster, one_process, 0.05, "CPU").status == "improvement"  # its tolerance is all it knows
    device = entry(samples(1.0, 9), process_spread=0.2, processes=3)
    assert judge(time_metric(samples(0.88, 10)), device, 0.05, "GPU").status == "improvement"


def test_unchanged_code_in_a_fast_process_is_never_reported_as_improved_through_the_gate(tmp_path: Path) -> None:
    judging = Judging(settings(tmp_path), FixedBaselines({"step.host_overhead": host_entry(301, 12, **LINEAR)}))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    for seed, fast in enumerate((108, 82.7, 60, 200)):
        [verdict] = judging.judge(context, [host(fast, 20 + seed)])
        assert verdict.status == "unchanged", verdict.message


def test_a_recording_stores_the_median_processs_host_overhead_and_its_spread(tmp_path: Path) -> None:
    recorder = Recorder(processes=3)
    judging = Judging(settings(tmp_path, update=True), FixedBaselines({}, path=str(tmp_path / "f.yaml")), recorder)
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    main = [time_metric(samples(1e-3, 30)), host(82.7, 31)]  # this process: a fast one
    judging.store(context, judging.judge(context, main))
    runs = [
        {"step.time": time_metric(samples(1e-3, 32)), "step.host_overhead": host(301, 33)},
        {"step.time": time_metric(samples(1e-3, 34)), "step.host_overhead": host(422, 35)},
    ]
    assert judging.second_look(NODE, lambda n: (runs[:n], "")) is None
    [(_, (_, tests))] = recorder.pending().items()
    stored = tests[NODE]["step.host_overhead"]
    assert stored["value"] == pytest.approx(runs[0]["step.host_overhead"].value)  # the median process, not the fast
    assert stored["processes"] == 3 and stored["process_spread"] > 1.0  # 422 / 82.7: over the timing cap, allowed
    assert entry_problem(stored) is None
    assert entry_problem({**entry([1.0, 1.1, 1.2]), "process_spread": 4.1}) is not None  # a time's stays capped


def test_a_host_overheads_wide_spread_warns_about_nothing() -> None:
    runs = [host(v, 40 + i) for i, v in enumerate((82.7, 301, 422))]
    for run in runs:
        run.tolerance = 0.25
    combined = combine(runs[0], runs[1:], 0.25)
    assert combined.value == pytest.approx(runs[1].value) and combined.extra["process_spread"] > 1.0
    assert tolerance_warning(combined, NODE) is None  # its spread narrows gains only: no later verdict is undecided
