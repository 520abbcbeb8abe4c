"""Issue 35, "the gate switched off or loosened": an edit that loosens the gate is refused or listed, never silent.

N1 a samples list that widens the bootstrap interval; N2 an entry's ``method`` edited; N6 a PR's own ini or marker
tolerances; N8 a pinned calibration; a ``process_spread`` wide enough to excuse a 9.7x slowdown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.baselines.diff import diff_tests, loosening
from pytest_gpuperf.baselines.schema import BaselineError, parse_baseline_text
from tests.test_baseline_ref import git

US = 1e-6


def _entry_text(**fields: object) -> str:
    """A baseline file whose one entry holds ``fields`` (dumped by PyYAML: ``4.0e-06``, which the reader takes)."""
    import yaml

    data = {"schema_version": 1, "fingerprint": {"backend": "cpu"}, "tests": {"t::a": {"step.time": fields}}}
    return yaml.safe_dump(data)


def _time_entry(samples: list[float], value: float = 4 * US, kind: str = "time", better: str = "lower") -> dict:
    return {"value": value, "unit": "s", "better": better, "kind": kind, "samples": samples}


# -- N1: samples that widen the interval ------------------------------------------------------------------------
#: The issue's attack: 7 samples at the value and 23 at 25x: a real 20x slowdown read "95% CI -100%..+1892%".
POISONED = [4 * US] * 7 + [100 * US] * 23
HONEST = [4 * US * (1 + 0.01 * i) for i in range(30)]  # a quiet recording: 30 samples within 30%


def test_samples_spread_wide_enough_to_excuse_any_slowdown_are_refused_by_the_reader(tmp_path: Path) -> None:
    text = _entry_text(**_time_entry(POISONED))
    with pytest.raises(BaselineError, match=r"samples are too spread to judge against: .* differ 25x"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_samples_added_to_a_throughput_entry_are_checked_against_its_value(tmp_path: Path) -> None:
    value = 1e6
    samples = [value] * 7 + [value / 25] * 23  # the judged (high) quantile sits at the value, the rest 25x slower
    text = _entry_text(**_time_entry(samples, value=value, kind="throughput", better="higher"))
    with pytest.raises(BaselineError, match=r"samples are too spread"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_samples_that_disagree_with_the_value_are_refused(tmp_path: Path) -> None:
    text = _entry_text(**_time_entry([100 * US] * 30))
    with pytest.raises(BaselineError, match=r"samples disagree with the value"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_an_honest_recording_is_read_and_written(tmp_path: Path) -> None:
    from pytest_gpuperf.baselines.update import entries_for
    from pytest_gpuperf.results import Metric

    loaded = parse_baseline_text(tmp_path / "x.yaml", _entry_text(**_time_entry(HONEST, value=HONEST[6])))
    assert loaded.tests["t::a"]["step.time"]["samples"] == HONEST
    noisy = sorted([4 * US * (1 + 0.1 * (i % 7)) for i in range(200)])  # 60% spread, a busy but usable recording
    from pytest_gpuperf.stats import STAT_QUANTILE, quantile

    metric = Metric("step.time", quantile(noisy, STAT_QUANTILE), "s", "lower", "time", samples=noisy)
    from pytest_gpuperf.baselines.schema import entry_problem

    assert entry_problem(entries_for([metric])["step.time"]) is None


@pytest.mark.parametrize(
    ("before", "after", "fields"),
    [
        (
            _time_entry([], value=HONEST[6]),
            _time_entry(HONEST, value=HONEST[6]),
            ["samples"],
        ),  # added where the value alone judged
        (_time_entry(HONEST, value=HONEST[6]), _time_entry(HONEST[::3], value=HONEST[6]), ["samples"]),  # fewer
        (
            _time_entry(HONEST, value=HONEST[6]),
            _time_entry([s * (1 + 0.02 * i) for i, s in enumerate(HONEST)], value=HONEST[6]),
            ["samples"],
        ),  # wider around the same quantile
        (_time_entry(HONEST, value=HONEST[6]), _time_entry(sorted(HONEST * 2), value=HONEST[6]), []),  # narrower
        (_time_entry(HONEST, value=HONEST[6]), _time_entry([], value=HONEST[6]), []),  # removed: the value alone
        (_time_entry(HONEST, value=HONEST[6]), _time_entry(POISONED), ["entry"]),  # refused by the reader
    ],
)
def test_a_samples_edit_that_widens_the_interval_loosens_the_gate(before: dict, after: dict, fields: list) -> None:
    before = {k: v for k, v in before.items() if v != []}
    after = {k: v for k, v in after.items() if v != []}
    assert loosening(before, after) == fields
    [change] = diff_tests("b.yaml", {"t": {"m": before}}, {"t": {"m": after}})
    assert change.loosens is bool(fields)


def test_an_edited_samples_list_is_listed_as_loosening_under_the_ref() -> None:
    before, after = _time_entry(HONEST[:10], value=HONEST[1]), _time_entry(HONEST, value=HONEST[1])
    [change] = diff_tests("b.yaml", {"t::a": {"step.time": before}}, {"t::a": {"step.time": after}})
    assert change.loosens and change.detail == "same value; also changed: samples; loosened by: samples"


# -- the process_spread cap ---------------------------------------------------------------------------------------
def test_a_process_spread_that_would_excuse_a_9x_slowdown_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"process_spread must be <= 1, got 9.7: the recording's processes"):
        parse_baseline_text(tmp_path / "x.yaml", _entry_text(value=1.0, kind="time", process_spread=9.7))
    parse_baseline_text(tmp_path / "x.yaml", _entry_text(value=1.0, kind="time", process_spread=0.9))


def test_a_process_spread_past_the_tolerance_is_listed_as_loosening() -> None:
    before, after = {"value": 1.0, "kind": "time"}, {"value": 1.0, "kind": "time", "process_spread": 0.5}
    assert loosening(before, after) == ["process_spread"]
    assert loosening({**before, "process_spread": 0.1}, after) == ["process_spread"]


# -- N2: an entry's method -------------------------------------------------------------------------------------
def test_a_method_change_loosens_the_gate() -> None:
    entry = {"value": 1.0, "kind": "time", "method": "thread_cpu"}
    assert loosening(entry, {**entry, "method": "wall"}) == ["method"]
    assert loosening(entry, {**entry, "method": "cuda_graph"}) == ["method"]
    assert loosening(entry, entry) == []


def test_a_stored_method_is_followed_only_by_a_clock_that_can_take_it() -> None:
    from pytest_gpuperf.measuring.plan import timed_like
    from pytest_gpuperf.timing.sampling import MeasureConfig

    config = MeasureConfig()
    assert timed_like({"method": "cuda_graph"}, config).cpu_clock == config.cpu_clock  # not a CPU clock: ignored
    assert timed_like({"method": "thread_cpu"}, config).cpu_clock == "thread"
    assert timed_like({"method": "wall"}, config).cuda_graph == config.cuda_graph  # not a GPU method: ignored


def test_a_wall_calibration_is_never_read_as_another_machine_when_the_thread_clock_matches() -> None:
    """The issue's N2: method edited to wall, the stored calibration a thread-clock one, a busy run: inconclusive,
    with the reason, never "another machine" and never judged ok."""
    from pytest_gpuperf.judging.machine_rule import machine_change

    entry = {"value": 1.0, "kind": "time", "method": "wall", "calibration": 26 * US, "calibration_spread": 0.02}
    busy = {"method": "events", "calibration": 47 * US, "calibration_spread": 0.02, "calibration_other": 26 * US}
    reason = machine_change(busy, entry, 0.25)
    assert reason is not None and "thread-CPU calibration matches it" in reason and "method 'wall'" in reason
    assert "another machine" not in reason


def test_a_run_timed_by_another_clock_compares_the_calibration_of_the_entrys_clock() -> None:
    from pytest_gpuperf.judging.machine_rule import calibration_ratio, machine_change

    entry = {"value": 1.0, "kind": "time", "method": "thread_cpu", "calibration": 26 * US}
    blocking = {"method": "wall", "calibration": 52 * US, "calibration_other": 26 * US}  # the step blocks now
    assert calibration_ratio(blocking, entry) == pytest.approx(1.0)
    assert machine_change(blocking, entry, 0.25) is None


# -- N8: a pinned calibration ----------------------------------------------------------------------------------
def test_a_pinned_calibration_is_named_in_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.judging.machine_rule import machine_change
    from pytest_gpuperf.timing import calibration

    monkeypatch.setenv(calibration.PIN_ENV, "9e-05")
    facts = calibration.host_calibration().facts("thread_cpu")
    assert facts["calibration_pinned"] == "GPUPERF_PIN_CALIBRATION=9e-05"
    reason = machine_change(facts, {"value": 1.0, "calibration": 26 * US}, 0.25)
    assert reason is not None and reason.startswith("this run's calibration is pinned by GPUPERF_PIN_CALIBRATION=9e-05")


def test_a_pinned_calibration_is_said_once_in_the_summary_and_fails_under_strict(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.timing.calibration import PIN_ENV
    from tests.steps import MATMUL_CHAIN

    pytester.makepyfile(test_step=MATMUL_CHAIN.format(work=1))
    monkeypatch.setenv(PIN_ENV, "2e-05")
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    monkeypatch.setenv(PIN_ENV, "9e-05")  # one line of a CI environment
    result = pytester.runpytest("--gpuperf", "--gpuperf-strict", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*pinned by GPUPERF_PIN_CALIBRATION=9e-05*(--gpuperf-strict)*"], consecutive=False)
    notes = [line for line in result.outlines if line.startswith("note: the host calibration is pinned by")]
    assert len(notes) == 1 and "GPUPERF_PIN_CALIBRATION=9e-05" in notes[0]


# -- N6: a PR's own tolerances --------------------------------------------------------------------------------
RECORD = """
import pytest

VALUES = {values!r}

def test_a(gpuperf):
    gpuperf.record("script.latency", VALUES["a"], "s")

@pytest.mark.gpuperf({marker})
def test_b(gpuperf):
    gpuperf.record("script.latency", VALUES["b"], "s")
"""


def test_ini_addopts_parsing_finds_every_spelling() -> None:
    from pytest_gpuperf.baselines.tolerance_ref import addopts_values, ini_section, tolerance_keys

    keys = tolerance_keys()
    assert "gpuperf_cpu_time_tolerance" in keys
    found = addopts_values("-q --gpuperf-cpu-time-tolerance=1000 -o gpuperf_time_tolerance=5", keys)
    assert found == {"gpuperf_cpu_time_tolerance": "1000", "gpuperf_time_tolerance": "5"}
    assert addopts_values("--override-ini=gpuperf_memory_tolerance=2", keys) == {"gpuperf_memory_tolerance": "2"}
    assert ini_section("pytest.ini", "[pytest]\naddopts = -x\n") == {"addopts": "-x"}
    assert ini_section("setup.cfg", "[tool:pytest]\ngpuperf_time_tolerance = 0.1\n") == {
        "gpuperf_time_tolerance": "0.1"
    }
    toml = '[tool.pytest.ini_options]\naddopts = ["-o", "gpuperf_time_tolerance=9"]\n'
    assert ini_section("pyproject.toml", toml) == {"addopts": "-o gpuperf_time_tolerance=9"}
    assert ini_section("tox.ini", "[tox]\nenvlist = py\n") is None


def test_a_marker_at_the_ref_is_read_from_its_test_file() -> None:
    from pytest_gpuperf.baselines.tolerance_ref import marker_at_ref

    text = (
        "import pytest\npytestmark = pytest.mark.gpuperf(tolerance=0.3)\n"
        "class TestC:\n    @pytest.mark.gpuperf(time_tolerance={'cpu': 0.5})\n    def test_x(self): ...\n"
        "def test_y(): ...\n"
    )
    assert marker_at_ref(text, "t.py::TestC::test_x[cpu]") == {"time_tolerance": {"cpu": 0.5}, "tolerance": 0.3}
    assert marker_at_ref(text, "t.py::test_y") == {"tolerance": 0.3}
    assert marker_at_ref(text, "t.py::test_new") is None


def test_a_pr_that_raises_its_own_tolerances_is_listed_and_fails_under_strict(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    git(pytester.path, "init", "-q", "-b", "main")
    pytester.makeini("[pytest]\naddopts = -q\n")
    pytester.makepyfile(test_rec=RECORD.format(values={"a": 1.0, "b": 1.0}, marker="tolerance=0.1"))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=2)
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")

    # The "PR": both 20x slower, the ini's default tolerance and test_b's marker raised to hide it.
    pytester.makeini("[pytest]\naddopts = -q -o gpuperf_time_tolerance=1000\n")
    pytester.makepyfile(test_rec=RECORD.format(values={"a": 20.0, "b": 20.0}, marker="tolerance=1e308"))
    args = ["--gpuperf", *fast_args, "--gpuperf-baseline-ref", "main", "--gpuperf-json", "r.json"]
    result = pytester.runpytest(*args, "--gpuperf-markdown", "r.md", "--gpuperf-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*gpuperf baseline changes against main*",
            "tox.ini: tolerance loosened gpuperf_time_tolerance: gpuperf_time_tolerance 0.05 at main*"
            "-> 1000 in this run*[[]LOOSENS THE GATE[]]",
            "test_rec.py: tolerance loosened test_rec.py::test_b* script.latency: tolerance 0.1 at main -> 1e+308*"
            "[[]LOOSENS THE GATE[]]",
            "*--gpuperf-strict: 2 tolerance(s) looser than at main*the run fails*",
        ],
        consecutive=False,
    )
    changes = json.loads((pytester.path / "r.json").read_text())["gpuperf"]["baseline_ref"]["changes"]
    looser = [c for c in changes if c["change"] == "tolerance loosened"]
    assert {(c["metric"], c["before"], c["after"]) for c in looser} == {
        ("gpuperf_time_tolerance", 0.05, 1000.0),
        ("script.latency", 0.1, 1e308),
    }
    assert all(c["loosens"] for c in looser)
    markdown = (pytester.path / "r.md").read_text()
    assert "tolerance loosened :warning:" in markdown and "2 change(s) loosen the gate" in markdown
    # The same tolerances given on the job's own command line are the caller's, not the PR's.
    pytester.makeini("[pytest]\naddopts = -q\n")
    pytester.makepyfile(test_rec=RECORD.format(values={"a": 1.0, "b": 1.0}, marker="tolerance=0.1"))
    result = pytester.runpytest(*args, "--gpuperf-strict", "-o", "gpuperf_time_tolerance=0.5")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*tolerance loosened*")
