"""What the reports say once, and only when asked: a reason once, no unasked-for blocks, A/B under -q, every
Markdown row with a verdict, balanced messages, JSON counts and paths, reports on stdout, probe noise dropped."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_gpuperf.judging.evidence import disagreement_reason, first_clause, inconclusive, spread_fix
from pytest_gpuperf.reporting.json_report import build_report
from pytest_gpuperf.reporting.markdown import render_markdown
from pytest_gpuperf.reporting.records import TestRecord
from pytest_gpuperf.reporting.terminal import failure_longrepr, write_terminal_summary
from pytest_gpuperf.reporting.verdict_text import short_fact, verdict_word
from pytest_gpuperf.results import verdict_to_dict
from tests.test_calibration import US, calibrated, judge
from tests.test_verdicts import entry, samples, time_metric

CALIBRATION = "this machine's calibration (a 128x128 fp32 matmul on one thread) ran 2.00x slower than on the machine"


def balanced(text: str) -> bool:
    """True when every parenthesis of ``text`` closes, in order."""
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


class Terminal:
    """What a test of the terminal summary needs of pytest's terminal reporter: the lines it was given."""

    def __init__(self, verbosity: int = 0) -> None:
        self.verbosity = verbosity
        self.lines: list[str] = []
        self.config: Any = None

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.extend(str(line).splitlines())

    def write_sep(self, sep: str, title: str = "", **markup: bool) -> None:
        self.lines.append(f"{sep * 3} {title} {sep * 3}")

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _metric(status: str, **fields: Any) -> dict[str, Any]:
    base = {"metric": "step.time", "label": "time", "unit": "s", "better": "lower", "kind": "time", "value": 2.0}
    return {**base, "baseline": 1.0, "ratio": 2.0, "tolerance": 0.25, "status": status, "message": "", **fields}


def _record(nodeid: str, metrics: list[dict[str, Any]], outcome: str = "passed", **data: Any) -> TestRecord:
    fingerprint = {"backend": "cpu", "device_name": "Fake CPU", "arch": "x86_64", "memory_gib": 1, "world_size": 1}
    payload = {"verdicts": metrics, "fingerprint": fingerprint, **data}
    return TestRecord(nodeid, outcome, 1.0, payload)


# -- the messages' parentheses ------------------------------------------------------------------------------------


def test_the_common_messages_close_every_parenthesis(tmp_path: Path) -> None:
    base = entry(samples(1.0, 2), **calibrated(26.0 * US))
    [machine], judging = judge(tmp_path, [time_metric(samples(2.0, 1), **calibrated(52.0 * US))], {"step.time": base})
    assert machine.status == "inconclusive" and CALIBRATION in machine.message
    [slower], _ = judge(tmp_path, [time_metric(samples(3.0, 1), **calibrated(26.0 * US))], {"step.time": base})
    assert slower.status == "regression"
    machine_dict, slower_dict = verdict_to_dict(machine), verdict_to_dict(slower)
    nested = inconclusive(machine, disagreement_reason(machine, slower, node_id="t.py::test_x[cpu]"))
    messages = {
        "machine": machine.message,
        "machine, first clause": first_clause(machine.reason or ""),
        "machine, verdict column": verdict_word(machine_dict),
        "a doubtful first run, confirmed otherwise": nested.message,
        "regression": slower.message,
        "regression, verdict column": verdict_word(slower_dict),
        "short fact": short_fact(slower_dict),
        "failure message": failure_longrepr("t.py::test_x[cpu]", [slower_dict], [slower.message]),
        "spread": spread_fix(4.87, 0.25, "t.py::test_x[cpu]", "this test's", "here", 3),
        **{f"warning {i}": line for i, line in enumerate(judging.warnings_for("test_x.py::test_step[fake]"))},
    }
    from tests.test_ab_units import judge as ab_judge

    for a, b in (([1.0, 1.01], [1.5, 1.52]), ([1.0, 1.3], [1.2, 1.0]), ([1.0, 1.01], [0.5, 0.51])):
        pair = ab_judge(a, b).as_dict()
        messages[f"A/B {pair['status']}"] = pair["message"]
    unbalanced = {name: text for name, text in messages.items() if not balanced(text)}
    assert not unbalanced
    # the verdict column shows the clause up to the parenthesis its "; " would have left open
    assert verdict_word(machine_dict) == f"inconclusive ({CALIBRATION} that recorded the baseline)"


def test_a_first_clause_ends_before_a_parenthesis_it_would_leave_open() -> None:
    assert first_clause("a (b; c) d; e") == "a"
    assert first_clause("a (b) c; d (e; f)") == "a (b) c"
    assert first_clause("plain; rest") == "plain"


# -- the terminal summary -----------------------------------------------------------------------------------------


def test_an_inconclusive_reason_is_printed_once_by_default_and_its_own_line_comes_with_v() -> None:
    reason = "the step never settled during warm-up (9 calls in 0.3 s: its times still trended); give it a budget"
    message = f"time 2.00 s > baseline 1.00 s: inconclusive, {reason}"
    records = [_record("t.py::test_x[cpu]", [_metric("inconclusive", message=message, reason=reason)])]
    default = Terminal(0)
    write_terminal_summary(default, records)
    # the table row's short word and first clause; the full reason is pytest's warning, shown at the test
    assert "inconclusive (the step never settled during warm-up (9 calls in 0.3 s: its times still trended))" in (
        default.text
    )
    assert "give it a budget" not in default.text and "inconclusive: t.py" not in default.text
    verbose = Terminal(1)
    write_terminal_summary(verbose, records)
    assert f"inconclusive: t.py::test_x[cpu]: {message}" in verbose.text
    quiet = Terminal(-1)
    write_terminal_summary(quiet, records)
    assert quiet.lines == ["gpuperf: 1 test, 1 metrics: 1 inconclusive (Fake CPU)"]
    unwarned = Terminal(0)  # --disable-warnings: no warnings summary, so the reason has its own line
    plugins = SimpleNamespace(has_plugin=lambda name: True)
    unwarned.config = SimpleNamespace(option=SimpleNamespace(disable_warnings=True), pluginmanager=plugins)
    write_terminal_summary(unwarned, records)
    assert f"inconclusive: t.py::test_x[cpu]: {message}" in unwarned.text


def test_the_record_command_leaves_out_a_test_whose_body_failed() -> None:
    new = {**_metric("new"), "baseline": None, "ratio": None}
    records = [
        _record("t.py::test_raised[cpu]", [new], outcome="failed", body_failed=True),
        _record("t.py::test_strict[cpu]", [new], outcome="failed"),  # failed by --gpuperf-strict: record it
        _record("t.py::test_new[cpu]", [new]),
    ]
    terminal = Terminal(0)
    write_terminal_summary(terminal, records)
    head = terminal.lines.index("2 test(s) have no baseline for this hardware; record them with:")
    command = terminal.lines[head + 1]
    assert "test_new" in command and "test_strict" in command and "test_raised" not in command
    slower = [
        _record("t.py::test_raised[cpu]", [_metric("regression")], outcome="failed", body_failed=True),
        _record("t.py::test_slower[cpu]", [_metric("regression")], outcome="failed"),
    ]
    markdown = render_markdown(build_report(slower, Path.cwd()), slower)
    [command] = [line for line in markdown.splitlines() if line.startswith("pytest --gpuperf --gpuperf-update")]
    assert "test_slower" in command and "test_raised" not in command


# -- the features' blocks -----------------------------------------------------------------------------------------


def _config(verbosity: int, stash: dict[Any, Any]) -> SimpleNamespace:
    config = SimpleNamespace(stash=pytest.Stash(), option=SimpleNamespace(verbose=verbosity))
    for key, value in stash.items():
        config.stash[key] = value
    return config


def test_the_profiling_block_shows_measured_roofs_only_with_v() -> None:
    from pytest_gpuperf.keys import SESSION_KEY
    from pytest_gpuperf.profiling import plugin
    from pytest_gpuperf.profiling.records import USER_PROPERTY

    roofs = SimpleNamespace(calibrated=["cpu-fake-t1"], store=SimpleNamespace(where="memory only"))
    stash = {SESSION_KEY: object(), plugin.EXTENSION_KEY: SimpleNamespace(roofs=roofs)}
    ok = TestRecord("t.py::test_x[cpu]", "passed", 1.0, {}, [(USER_PROPERTY, "analytic compute-bound: AI 64")])

    def lines(verbosity: int, records: list[TestRecord]) -> list[str]:
        found = plugin.pytest_gpuperf_summary_sections(_config(verbosity, stash), records)  # type: ignore[arg-type]
        return [line for section in found or [] for line, _ in section.lines]

    assert lines(0, [ok]) == [] and lines(-1, [ok]) == []  # nothing the reader asked for, nothing flagged
    assert "measured roofs for cpu-fake-t1; kept in memory only" in lines(1, [ok])
    flagged = TestRecord("t.py::test_y[cpu]", "passed", 1.0, {}, [(USER_PROPERTY, "counting error 145%")])
    assert lines(0, [ok, flagged]) == ["t.py::test_y[cpu]", "  counting error 145%"]


def test_the_replicas_line_comes_with_v_and_a_failed_replica_at_any_verbosity() -> None:
    from pytest_gpuperf.distributed import plugin
    from pytest_gpuperf.keys import REPLICAS_KEY

    def lines(verbosity: int, failures: list[str]) -> list[str]:
        replicas = SimpleNamespace(runs=4, started=2, failures=failures)
        found = plugin.pytest_gpuperf_summary_sections(_config(verbosity, {REPLICAS_KEY: replicas}), [])  # type: ignore[arg-type]
        return [line for section in found or [] for line, _ in section.lines]

    assert lines(0, []) == [] and lines(-1, []) == []
    assert lines(1, []) == ["gpuperf replicas: 4 run(s) in fresh processes on 2 worker start(s)"]
    failed = lines(-1, ["t.py::x: error"])
    assert [line.split(";")[0] for line in failed] == ["gpuperf replicas: 1 run(s) did not finish"]


# -- A/B ----------------------------------------------------------------------------------------------------------


def test_ab_under_q_prints_one_line_per_test_and_its_table_by_default() -> None:
    from pytest_gpuperf.ab.report import terminal_lines
    from tests.test_ab_units import _summary

    summary = _summary()
    ok = {"outcome": "passed", "status": "unchanged", "metrics": summary["tests"]["t.py::test_x[cpu]"]["metrics"]}
    summary["tests"]["t.py::test_ok[cpu]"] = ok
    quiet = [line for line, _ in terminal_lines(summary, -1)]
    assert quiet == [
        "WARNING: compiled extension(s) built only in the working tree",
        "t.py::test_x[cpu]  REGRESSION",
        "t.py::test_ok[cpu]  ok",
    ]
    default = "\n".join(line for line, _ in terminal_lines(summary, 0))
    assert "paired B/A" in default and "A = origin/main" in default
    doubtful = {**ok["metrics"][0], "status": "inconclusive", "message": "time: inconclusive, the reason"}
    summary["tests"]["t.py::test_ok[cpu]"] = {**ok, "status": "inconclusive", "metrics": [doubtful]}
    why = "    time: time: inconclusive, the reason"
    assert why not in [line for line, _ in terminal_lines(summary, 0)]
    for verbosity, reasons in ((1, False), (0, True)):  # -v, or pytest shows no warnings (the reason's home)
        assert why in [line for line, _ in terminal_lines(summary, verbosity, reasons)]


def test_ab_rounds_report_each_finished_pair() -> None:
    from tests.test_ab_units import FakeRunner

    values = {"A": {"t.py::x": [1.0] * 4}, "B": {"t.py::x": [1.0] * 4}}
    fake = FakeRunner(values, collected={"A": ["t.py::x"], "B": ["t.py::x"]})
    said: list[str] = []
    fake.runner.progress = said.append
    fake.runner.run(["t.py::x"])
    assert said == [
        "round pair 1 (at least 2, at most 4) measured 1 test(s) per side (A 1.0 s and B 1.0 s); "
        "1 test(s) need another pair",
        "round pair 2 (at least 2, at most 4) measured 1 test(s) per side (A 1.0 s and B 1.0 s); every test decided",
    ]


def test_ab_progress_goes_to_the_terminal_reporter_and_not_under_qq() -> None:
    from pytest_gpuperf.ab.state import AbState

    terminal = Terminal()
    plugins = SimpleNamespace(get_plugin=lambda name: terminal if name == "terminalreporter" else None)

    def state(verbosity: int) -> AbState:
        config = SimpleNamespace(option=SimpleNamespace(verbose=verbosity, dist="no"), pluginmanager=plugins)
        worktree = SimpleNamespace(ref="origin/main", short="0123456789ab")
        return AbState(config, None, worktree, Path("."))  # type: ignore[arg-type]

    say = state(-1)._progress(6)
    assert say is not None
    say("round pair 1")
    assert terminal.lines == [
        "gpuperf A/B against origin/main (0123456789ab): measuring 6 perf test(s) in alternating worker processes "
        "of both sides",
        "gpuperf A/B against origin/main (0123456789ab): round pair 1",
    ]
    assert state(-2)._progress(6) is None


# -- Markdown and JSON --------------------------------------------------------------------------------------------


def _table_rows(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| test")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_every_markdown_row_has_a_verdict_and_a_failed_test_is_red(tmp_path: Path) -> None:
    throughput = _metric(
        "regression", metric="step.throughput", label="throughput", unit="items/s", better="higher", ratio=0.5
    )
    time_info = _metric("info", ratio=None, tolerance=None)  # shown beside the regressed throughput
    records = [
        _record("t.py::test_slow[cpu]", [throughput, time_info], outcome="failed"),
        _record("t.py::test_bound[cpu]", [_metric("unchanged", ratio=1.0, value=1.0)], outcome="failed"),
    ]
    records[1].failure = "profiling: bound=compute-bound expected, measured memory-bound"
    markdown = render_markdown(build_report(records, tmp_path), records)
    regressions = markdown.split("### :red_circle: Regressions")[1].split("\n\n")[1]
    assert [row[-1] for row in _table_rows(regressions)] == [
        ":red_circle: REGRESSION",
        "not judged \\(informational\\)",
    ]
    assert all(row[-1] for row in _table_rows(markdown))
    assert markdown.startswith("## :red_circle: pytest-gpuperf: ")
    assert "(2 perf tests, 1 failed without a failing metric)" in markdown.splitlines()[0]
    failed = markdown.split("Failed without a failing metric (1 test)")[1]
    why = r":red_circle: FAILED: profiling\: bound=compute-bound expected, measured memory-bound"
    assert _table_rows(failed)[0] == ["`t.py::test_bound[cpu]`", why]


def test_json_summary_counts_metrics_beside_tests_and_the_baseline_file_is_relative(tmp_path: Path) -> None:
    records = [
        _record("t.py::a[cpu]", [_metric("regression"), _metric("unchanged"), _metric("info")], outcome="failed"),
        _record("t.py::b[cpu]", [_metric("unchanged"), _metric("inconclusive")]),
    ]
    for record in records:
        record.data["baseline_file"] = str(tmp_path / "baselines" / "cpu-fake.yaml")
    gp = build_report(records, tmp_path)["gpuperf"]
    summary = gp["summary"]
    assert (summary["tests"], summary["failed"], summary["regression"], summary["inconclusive"]) == (2, 1, 1, 1)
    metrics = {status: n for status, n in summary["metrics"].items() if n}
    assert metrics == {"regression": 1, "unchanged": 2, "info": 1, "inconclusive": 1}
    assert gp["devices"][0]["baseline_file"] == "baselines/cpu-fake.yaml"
    outside = build_report(records, tmp_path / "elsewhere")["gpuperf"]["devices"][0]["baseline_file"]
    assert outside == str(tmp_path / "baselines" / "cpu-fake.yaml")  # not below the rootdir: kept as it is


RECORDED = """
import os
import pytest

@pytest.mark.parametrize("name", ["a", "b"])
def test_value(gpuperf, name):
    gpuperf.record("value", float(os.environ.get("VALUE", "1")), "B")
"""


def test_reports_on_stdout_and_a_broken_baseline_said_once(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_r=RECORDED)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=2)
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-json", "-", "-p", "no:terminal")
    assert result.ret == 0
    document = json.loads(result.stdout.str())
    assert document["gpuperf"]["summary"]["tests"] == 2 and document["gpuperf"]["artifacts"] == {}
    markdown = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-markdown", "-")
    markdown.stdout.fnmatch_lines(["test_r.py ..*", "## :green_circle: pytest-gpuperf: 2 unchanged (2 perf tests)"])
    assert not (pytester.path / "-").exists()

    [path] = (pytester.path / "baselines").glob("*.yaml")
    path.write_text(path.read_text() + "broken: [1, 2\n")
    broken = pytester.runpytest("--gpuperf", *fast_args)
    broken.assert_outcomes(failed=2)
    out = broken.stdout.str().split("short test summary info")[0]  # pytest repeats failures there (whole, under CI)
    assert out.count("not valid YAML") == 1, out  # the first test's message; the second points to it
    broken.stdout.fnmatch_lines(["*: not a valid baseline file (the failure of test_r.py::test_value[[]a-cpu[]] says*"])


# -- the peak-memory probe's own noise ----------------------------------------------------------------------------

PROBE = """
import os, sys, torch
PROBE_FILTERED = {filtered}
state = {{"x": torch.randn(512, 512)}}

def step():
    os.write(2, b"a line of the step's own\\n")
    state["x"] = torch.randn(512, 512)  # frees a tensor allocated before the profiler started

if PROBE_FILTERED:
    from pytest_gpuperf.backends.cpu_memory import measure_cpu_peak_bytes
    assert measure_cpu_peak_bytes(step) > 0
else:
    from torch.autograd.profiler import profile
    with profile(use_cpu=True, use_kineto=True, profile_memory=True):
        step()
"""


def test_the_peak_memory_probe_drops_torchs_allocator_note_and_keeps_the_steps_stderr() -> None:
    def stderr(filtered: bool) -> str:
        code = textwrap.dedent(PROBE.format(filtered=filtered))
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return run.stderr

    unfiltered = stderr(False)
    if "allocated before the profiling started" not in unfiltered:
        pytest.skip("this torch logs no allocator note for a tensor older than the profiler")
    filtered = stderr(True)
    assert "a line of the step's own" in filtered
    assert "allocated before the profiling started" not in filtered and "CPUAllocator" not in filtered
