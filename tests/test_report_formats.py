"""The CI-facing reports: JSON (read back by pytest-benchmark's own CLI), Markdown, JUnit XML properties."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

TIMED = """
import pytest
import torch

@pytest.mark.gpuperf(informational="bound")  # the bound class follows the machine's load: not this test's subject
def test_matmul(gpuperf):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, 128, generator=gen)
    gpuperf.measure(lambda: a @ a, flops=2 * 128**3, bytes_moved=3 * 128 * 128 * 4)
"""

RECORDED = """
import pytest

VALUES = {values!r}

@pytest.mark.parametrize("name", sorted(VALUES))
def test_latency(gpuperf, name):
    gpuperf.record("script.latency", VALUES[name], "s")
"""


def test_json_report_is_versioned_and_pytest_benchmark_compare_reads_it(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_timed=TIMED)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    result = pytester.runpytest(
        "--gpuperf", *fast_args, "-o", "gpuperf_cpu_time_tolerance=10", "--gpuperf-json", "out/r.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*JSON report: out/r.json (1 benchmarks)*"])
    doc = json.loads((pytester.path / "out" / "r.json").read_text())
    assert (doc["format"], doc["format_version"]) == ("pytest-gpuperf-report", 1)
    assert doc["machine_info"]["gpuperf_devices"][0]["backend"] == "cpu"
    assert {"id", "dirty", "branch"} <= set(doc["commit_info"])
    [bench] = doc["benchmarks"]
    assert bench["fullname"] == "test_timed.py::test_matmul[cpu]"
    assert bench["name"] == "test_matmul[cpu]" and bench["param"] == "cpu"
    assert bench["params"] == {"gpuperf_backend": "cpu"}  # the test's parametrize values, as pytest-benchmark does
    [test] = doc["gpuperf"]["tests"]
    time_metric = next(m for m in test["metrics"] if m["metric"] == "step.time")
    samples = time_metric["sample_values"]
    assert bench["stats"]["rounds"] == len(samples) >= 1  # how many fit in the budget depends on the machine's load
    assert bench["stats"]["median"] == pytest.approx(statistics.median(samples))
    assert bench["stats"]["min"] == min(samples) and bench["stats"]["max"] == max(samples)
    assert bench["stats"]["ops"] == pytest.approx(1 / statistics.mean(samples))
    memory = next(m for m in test["metrics"] if m["metric"] == "step.peak_memory")
    assert memory["baseline"] is not None and memory["status"] in ("unchanged", "improvement", "regression")
    [device] = doc["gpuperf"]["devices"]
    assert device["baseline_file"].endswith(".yaml") and device["fingerprint"]["world_size"] == 1
    assert doc["gpuperf"]["summary"]["tests"] == 1 and doc["gpuperf"]["artifacts"]["json"] == "out/r.json"

    compared = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(pytester.path / "out" / "r.json")],
        capture_output=True,
        text=True,
        cwd=pytester.path,
        timeout=120,
    )
    assert compared.returncode == 0, compared.stderr
    assert "test_matmul[cpu]" in compared.stdout and "Failed to load" not in compared.stdout + compared.stderr


def test_markdown_lists_regressions_then_improvements_then_unchanged_and_goes_to_the_step_summary(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {"a_steady": 1.0, "b_slower": 1.0, "c_faster": 1.0}
    pytester.makepyfile(test_rec=RECORDED.format(values=before))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=3)
    summary = pytester.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/repo")
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    after = {"a_steady": 1.01, "b_slower": 1.5, "c_faster": 0.5}
    pytester.makepyfile(test_rec=RECORDED.format(values=after))
    result = pytester.runpytest(
        "--gpuperf", *fast_args, "--gpuperf-markdown", "pr.md", "--junitxml", "junit.xml", "--gpuperf-json", "r.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    text = (pytester.path / "pr.md").read_text()
    assert text.startswith("## :red_circle: pytest-gpuperf: 1 regression, 1 improvement, 1 unchanged (3 perf tests)")
    regress, improve, unchanged = (
        text.index(h)
        for h in ("### :red_circle: Regressions (1 metric of 1 test)", "Improvements (1 metric", "Unchanged (1 metric")
    )
    assert regress < improve < unchanged
    assert text.index("test_latency[b_slower-cpu]") < text.index("test_latency[c_faster-cpu]")
    row = "| `test_rec.py::test_latency[b_slower-cpu]` | script\\: latency | 1\\.00 s | 1\\.50 s | +50\\.0% | +5\\.0% |"
    assert row + " :red_circle: REGRESSION |" in text
    regressions = text.split("Regressions")[1].split("###")[0]
    assert "a_steady" not in regressions and "c_faster" not in regressions  # only the failing rows
    assert "pytest --gpuperf --gpuperf-update 'test_rec.py::test_latency[b_slower-cpu]'" in text
    assert "**AMD" in text or "(cpu, " in text  # the fingerprint line names the device and backend
    assert "[artifacts of this run](https://github.com/octo/repo/actions/runs/4242#artifacts)" in text
    assert "- `junit.xml`" in text and "- `r.json`" in text
    assert summary.read_text() == "earlier step\n" + text + "\n"

    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(pytester.path / "junit.xml").iter("testcase")
    }
    assert properties["test_latency[b_slower-cpu]"] == {"gpuperf.script.latency": "1.5 s [regression]"}
    assert properties["test_latency[c_faster-cpu]"] == {"gpuperf.script.latency": "0.5 s [improvement]"}
    assert properties["test_latency[a_steady-cpu]"] == {"gpuperf.script.latency": "1.01 s [unchanged]"}


def test_no_step_summary_flag_and_plain_runs_leave_github_summary_alone(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_rec=RECORDED.format(values={"x": 1.0}))
    summary = pytester.path / "step-summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_no_step_summary=true").assert_outcomes(passed=1)
    pytester.runpytest(*fast_args).assert_outcomes(passed=1)  # no --gpuperf: no reports at all
    assert summary.read_text() == ""
    pytester.runpytest("--gpuperf", *fast_args).assert_outcomes(passed=1)
    assert "1 without baseline" in summary.read_text()


def test_metric_sections_render_without_a_baseline_ref_or_artifacts() -> None:
    from pytest_gpuperf.reporting.markdown import artifact_links

    assert artifact_links({}, env={}) == []
    lines = artifact_links({"plots": ["a.png", "b.png"], "json": "r.json"}, env={})
    assert lines == ["### Artifacts", "", "- `a.png`", "- `b.png`", "- `r.json`", ""]


def test_non_finite_numbers_are_written_as_null_so_the_json_stays_valid() -> None:
    from pytest_gpuperf.reporting.json_report import _finite

    assert _finite({"a": [float("nan"), 1.0, float("inf")]}) == {"a": [None, 1.0, None]}


def test_the_markdown_headline_counts_every_test_status_so_its_numbers_add_up() -> None:
    from pytest_gpuperf.reporting.markdown import COUNT_WORDS, HEADLINE_ORDER
    from pytest_gpuperf.results import STATUS_ORDER

    assert set(HEADLINE_ORDER) == set(STATUS_ORDER) <= set(COUNT_WORDS)


def test_a_regressed_throughput_shows_its_steps_time_beside_it_in_the_markdown() -> None:
    from pytest_gpuperf.reporting.markdown import render_markdown
    from pytest_gpuperf.reporting.records import TestRecord

    def verdict(metric: str, kind: str, unit: str, status: str, baseline: float, value: float) -> dict:
        ratio = value / baseline if status != "info" else None
        return {"metric": metric, "label": metric.rpartition(".")[2], "kind": kind, "unit": unit, "status": status,
                "better": "higher" if kind == "throughput" else "lower", "baseline": baseline, "value": value,
                "ratio": ratio, "tolerance": 0.25, "message": "", "extra": {}}  # fmt: skip

    record = TestRecord(
        "t.py::test_gelu[cpu]",
        "failed",
        1.0,
        {
            "verdicts": [
                verdict("step.throughput", "throughput", "elements/s", "regression", 5.05e9, 1.70e9),
                verdict("step.time", "time", "s", "info", 44.5e-6, 145e-6),
            ]
        },
    )
    document = {"gpuperf": {"summary": {"regression": 1, "tests": 1}, "devices": [], "artifacts": {}}}
    markdown = render_markdown(document, [record], env={})
    regressions = markdown.split("Regressions (1 metric of 1 test)", 1)[1].split("<details>", 1)[0]
    rows = [line for line in regressions.splitlines() if line.startswith("| `t.py")]
    assert [row.split(" | ")[1] for row in rows] == ["throughput", "time"]  # the time right below, not judged
    assert "+225\\.8%" in rows[1] and rows[1].endswith("| not judged \\(informational\\) |")  # a verdict
