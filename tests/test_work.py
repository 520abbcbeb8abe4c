"""Counted work per step: a changed workload is its own finding, in the terminal, the Markdown and the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baselines.policy import decide
from pytest_gpuperf.baselines.update import entries_for
from pytest_gpuperf.commands import update_command
from pytest_gpuperf.context import build_context
from pytest_gpuperf.judging.compare import judge
from pytest_gpuperf.judging.gate import suspects
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.judging.work import WORK_TOLERANCE, WORKLOAD, format_work, work_metrics
from pytest_gpuperf.reporting.verdict_text import short_fact, verdict_word
from pytest_gpuperf.results import KIND_THROUGHPUT, Metric, verdict_to_dict
from tests.test_judging import NODE, FakeBackend, settings
from tests.test_verdicts import entry, samples, time_metric

MIB = 2**20


def work_entry(value: float, unit: str = "B") -> dict[str, Any]:
    return {"value": value, "unit": unit, "better": "equal", "kind": "work"}


def judged(tmp_path: Path, metrics: list[Metric], entries: dict[str, Any], **overrides: Any) -> tuple[list[Any], Any]:
    judging = Judging(settings(tmp_path, **overrides), FixedBaselines(entries))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    verdicts = judging.judge(context, metrics)
    judging.store(context, verdicts)
    return verdicts, judging


def test_work_metrics_are_exact_counts_judged_within_counting_noise() -> None:
    flops, moved = work_metrics("step", 2.0 * 1024**3, 48.0 * MIB, {"flops_source": "flops= hint"})
    assert (flops.name, flops.unit, flops.kind, flops.better) == ("step.flops_per_step", "FLOP", "work", "equal")
    assert moved.value == 48 * MIB and isinstance(moved.value, int) and moved.tolerance == WORK_TOLERANCE
    assert flops.extra == {"source": "flops= hint"} and format_work(flops.value, "FLOP") == "2.15 GFLOP"
    same = judge(moved, work_entry(48.0 * MIB * 1.000004), WORK_TOLERANCE, "here")  # the file's 6 digits
    assert same.status == "unchanged"
    doubled = judge(Metric("step.bytes_per_step", 96 * MIB, "B", "equal", "work"), work_entry(48 * MIB), 0.01, "CPU")
    assert doubled.status == "changed" and doubled.failed
    assert doubled.message.startswith("the step now does 2x the work (bytes per step 48.00 MiB -> 96.00 MiB) on CPU")
    assert "if the test's workload grew on purpose, re-record" in doubled.message
    none_before = judge(Metric("step.flops_per_step", 10, "FLOP", "equal", "work"), work_entry(0, "FLOP"), 0.01, "CPU")
    assert none_before.status == "changed" and "work where it did none" in none_before.message


def test_less_work_is_an_improvement_that_passes_and_names_the_command_to_lock_it_in(tmp_path: Path) -> None:
    # one-pass std_mean: 16.7% fewer bytes per step; a flops= hint corrected downward reads the same
    entries = {"step.time": entry(samples(1.0, 2)), "step.bytes_per_step": work_entry(48 * MIB)}
    metrics = [time_metric(samples(1.0, 1)), Metric("step.bytes_per_step", 40 * MIB, "B", "equal", "work")]
    verdicts, judging = judged(tmp_path, metrics, entries)
    work = next(v for v in verdicts if v.metric.kind == "work")
    assert work.status == "improvement" and not work.failed
    assert work.message.startswith("bytes per step 48.00 MiB -> 40.00 MiB (0.833x) on ")
    assert work.message.endswith(f"the step does less work, an improvement; lock it in with: {update_command([NODE])}")
    assert judging.failure_lines(NODE) == []
    hint = judge(Metric("step.flops_per_step", 4, "FLOP", "equal", "work"), work_entry(6, "FLOP"), 0.01, "CPU")
    assert hint.status == "improvement" and not hint.failed


def test_more_work_fails_saying_so_first_with_the_slowdown_judged_beside_it(tmp_path: Path) -> None:
    entries = {"step.time": entry(samples(1.0, 2)), "step.bytes_per_step": work_entry(13.01 * MIB)}
    metrics = [time_metric(samples(2.15, 1)), Metric("step.bytes_per_step", 26.02 * MIB, "B", "equal", "work")]
    (work, timing), judging = judged(tmp_path, metrics, entries)  # the work first: the headline's order
    assert work.status == "changed" and work.message.startswith(
        "the step now does 2x the work (bytes per step 13.01 MiB -> 26.02 MiB)"
    )
    # Issue 38: the timing says how much slower the changed workload is, as a regression tagged by the work.
    assert timing.status == "regression" and timing.doubt == ""
    assert timing.metric.extra[WORKLOAD] == "+100.0% bytes per step"
    assert timing.message.startswith(
        "time +114.9% with +100.0% bytes per step: the step does more work, a changed workload; time 2.15 s > "
    )
    assert judging.failure_lines(NODE) == [work.message, timing.message]
    assert suspects([work, timing]) == []  # it fails on its counted work: no fresh process is spent on it
    head = short_fact(verdict_to_dict(work))
    assert head == "the step now does 2x the work (bytes per step 13.01 MiB -> 26.02 MiB)"


def test_the_same_work_getting_slower_is_still_a_regression(tmp_path: Path) -> None:
    entries = {"step.time": entry(samples(1.0, 2)), "step.bytes_per_step": work_entry(48 * MIB)}
    metrics = [time_metric(samples(2.0, 1)), Metric("step.bytes_per_step", 48 * MIB, "B", "equal", "work")]
    (timing, work), _ = judged(tmp_path, metrics, entries)
    assert timing.status == "regression" and work.status == "unchanged"


def test_a_baseline_recorded_before_work_was_stored_shows_it_and_does_not_fail_strict(tmp_path: Path) -> None:
    entries = {"step.time": entry(samples(1.0, 2))}
    metrics = [time_metric(samples(1.0, 1)), Metric("step.flops_per_step", 10, "FLOP", "equal", "work")]
    (_, work), judging = judged(tmp_path, metrics, entries, strict=True)
    assert work.status == "info" and "re-record to judge the step's work" in work.message
    assert not judging.failure_lines(NODE)


def test_update_keeps_an_unchanged_count_and_rewrites_a_changed_one() -> None:
    [metric] = [m for m in work_metrics("step", 0.0, 48 * MIB, {}) if m.name == "step.bytes_per_step"]
    new = entries_for([metric])
    assert new["step.bytes_per_step"] == work_entry(48 * MIB)
    assert "step.bytes_per_step" in decide([metric], {"step.bytes_per_step": work_entry(48 * MIB)}, new, "here")
    assert decide([metric], {"step.bytes_per_step": work_entry(24 * MIB)}, new, "here") == {}


SAXPY = """
import os
import pytest
import torch

N = int(os.environ.get("ROWS", "256"))


@pytest.mark.gpuperf(informational={"cpu": "bound"})  # the bound class follows the size and the machine's load
def test_add(gpuperf):
    x, y = torch.randn(N, 4096), torch.randn(N, 4096)
    out = torch.empty(N, 4096)
    gpuperf.measure(lambda: torch.add(x, y, out=out), items=N, unit="rows", memory=False)
"""


def test_end_to_end_the_work_change_is_reported_in_terminal_markdown_and_json(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_saxpy=SAXPY)
    args = ["--gpuperf", "-p", "no:randomly", "-o", "gpuperf_max_time=0.3", "-o", "gpuperf_processes=1"]
    pytester.runpytest(*args, "--gpuperf-update").assert_outcomes(passed=1)
    text = next((pytester.path / "baselines").glob("cpu-*.yaml")).read_text()
    assert "step.bytes_per_step:\n      value: 12582912\n      unit: B\n      better: equal\n      kind: work" in text
    monkeypatch.setenv("ROWS", "512")  # the test's size changed, its baseline did not
    result = pytester.runpytest(*args, "--gpuperf-json", "out.json", "--gpuperf-markdown", "out.md")
    result.assert_outcomes(failed=1)
    sentence = "the step now does 2x the work (bytes per step 12.00 MiB -> 24.00 MiB)"
    result.stdout.fnmatch_lines([f"*{sentence}*"])  # the failure message's first line
    result.stdout.fnmatch_lines(["*the code does more work per step; if the test's workload grew on purpose*"])
    markdown = (pytester.path / "out.md").read_text()
    assert "| bytes per step | 12\\.00 MiB | 24\\.00 MiB | +100\\.0% |" in markdown
    assert "CHANGED \\(the step does more work per step" in markdown
    report = json.loads((pytester.path / "out.json").read_text())
    metrics = {m["metric"]: m for test in report["gpuperf"]["tests"] for m in test["metrics"]}
    work = metrics["step.bytes_per_step"]
    assert work["status"] == "changed" and sentence in work["message"]
    throughput = metrics["step.throughput"]
    assert throughput["kind"] == KIND_THROUGHPUT and throughput["doubt"] != "work"
    monkeypatch.setenv("ROWS", "128")  # half the work: an optimisation passes as improved
    fewer = pytester.runpytest(*args, "-o", "gpuperf_time_tolerance=20", "-o", "gpuperf_cpu_time_tolerance=20")
    fewer.assert_outcomes(passed=1)
    fewer.stdout.fnmatch_lines(
        [
            "*bytes per step*12.00 MiB*6.00 MiB*improved*",
            "1 test(s) do less work per step than their baseline counted*lock it in with:",
            "    pytest --gpuperf --gpuperf-update 'test_saxpy.py::test_add[[]cpu[]]'",
        ]
    )


def test_a_changed_workloads_slowdown_fails_with_its_size_whatever_another_rule_doubted(tmp_path: Path) -> None:
    """Issue 38: the MiniLLM step with attention weights materialised read throughput -19.5% with +38.4% bytes per
    step; an unsettled run or a wide spread between the baseline's processes doubts the timing alone, but the
    baseline measured another workload: the slowdown is reported at its size, failing with the work."""
    base = {"value": 1000.0, "unit": "tokens/s", "better": "higher", "kind": "throughput"}
    rates = samples(1000.0, 2)
    entries = {
        "step.throughput": {**base, "samples": rates, "process_spread": 0.30, "processes": 3},
        "step.bytes_per_step": work_entry(100 * MIB),
    }
    slower = [r * 0.805 for r in samples(1000.0, 1)]
    for facts in ({}, {"settled": False}):
        throughput = Metric("step.throughput", 805.0, "tokens/s", "higher", KIND_THROUGHPUT, slower, extra=dict(facts))
        metrics = [throughput, Metric("step.bytes_per_step", 138.4 * MIB, "B", "equal", "work")]
        (work, timing), judging = judged(tmp_path, metrics, entries)
        assert work.status == "changed" and timing.status == "regression" and timing.doubt == ""
        assert timing.message.startswith(
            "throughput -19.5% with +38.4% bytes per step: the step does more work, a changed workload; "
        )
        assert ": inconclusive" not in timing.message and timing.metric.extra[WORKLOAD] == "+38.4% bytes per step"
        assert judging.failure_lines(NODE) == [work.message, timing.message]
        word = verdict_word(verdict_to_dict(timing))
        assert word.startswith("REGRESSION (a changed workload: +38.4% bytes per step; 95% CI -19.")


def test_less_work_that_runs_slower_is_a_regression_of_the_code_and_is_confirmed(tmp_path: Path) -> None:
    entries = {"step.time": entry(samples(1.0, 2)), "step.bytes_per_step": work_entry(48 * MIB)}
    metrics = [time_metric(samples(1.3, 1)), Metric("step.bytes_per_step", 40 * MIB, "B", "equal", "work")]
    (timing, work), _ = judged(tmp_path, metrics, entries)
    assert work.status == "improvement" and timing.status == "regression" and WORKLOAD not in timing.metric.extra
    assert timing.message.endswith("; with -16.7% bytes per step: the step does less work")
    assert suspects([timing]) == [timing]
