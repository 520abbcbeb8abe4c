"""End to end: reviewable updates (0-line diffs), only passed tests recorded, bad values refused, keys that miss.

Values are injected through ``gpuperf.record`` (deterministic), so no assertion depends on the machine's speed.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
import yaml

RECORDING_TEST = """
import json, pathlib
import pytest

VALUES = json.loads(pathlib.Path(__file__).with_name("values.json").read_text())

@pytest.mark.parametrize("case", sorted(VALUES))
def test_case(gpuperf, case):
    v = VALUES[case]
    gpuperf.record("mem", v["mem"], unit="B")
    gpuperf.record("score", v["score"], better="higher")
    gpuperf.record("kind", v["kind"])
    assert not v.get("fail"), "the implementation is wrong"
"""
#: One process per recording: the values are injected, so replicas in fresh processes (the CPU default of 3) would
#: only repeat them (replication is tested in tests/test_distributed_replicate.py and tests/test_verdicts_e2e.py).
FLAGS = ["-p", "no:cacheprovider", "-p", "no:randomly", "-o", "gpuperf_processes=1"]


def _setup(pytester: pytest.Pytester, values: dict) -> None:
    pytester.makepyfile(test_rec=RECORDING_TEST)
    (pytester.path / "values.json").write_text(json.dumps(values))


def _file(pytester: pytest.Pytester, directory: str = "baselines") -> Path:
    [path] = sorted((pytester.path / directory).glob("cpu-*.yaml"))
    return path


def _changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_rerecording_unchanged_code_gives_a_zero_line_diff_and_a_moved_metric_only_its_own_lines(
    pytester: pytest.Pytester,
) -> None:
    values = {
        "a": {"mem": 1_000_000, "score": 100.0, "kind": "compute-bound"},
        "b": {"mem": 2_000_000, "score": 50.0, "kind": "memory-bound"},
    }
    _setup(pytester, values)
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=2)
    path = _file(pytester)
    first = path.read_text()

    again = pytester.runpytest("--gpuperf-update", *FLAGS)
    again.assert_outcomes(passed=2)
    assert path.read_text() == first
    again.stdout.fnmatch_lines(
        [
            "gpuperf: 2 tests, 6 metrics: 6 kept within tolerance (*)",  # the summary line agrees with the file's
            "*baselines recorded in: *cpu-*.yaml: 2 test(s), 0 entr(ies) written, 6 kept*unchanged*",
        ]
    )

    values["a"]["mem"] = 1_010_000  # +1%: within the 5% memory tolerance
    values["b"]["score"] = 49.0  # -2%: within the default tolerance
    (pytester.path / "values.json").write_text(json.dumps(values))
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=2)
    assert path.read_text() == first

    values["b"]["score"] = 100.0  # doubled: past its tolerance
    (pytester.path / "values.json").write_text(json.dumps(values))
    moved = pytester.runpytest("--gpuperf-update", *FLAGS)
    moved.assert_outcomes(passed=2)
    assert _changed_lines(first, path.read_text()) == ["-      value: 50.0", "+      value: 100.0"]
    moved.stdout.fnmatch_lines(
        [
            "*2 test(s), 1 entr(ies) written, 5 kept within tolerance -- review the diff*",
            "  1 judged entr(ies) moved (old -> new):",
            "    test_rec.py::test_case[[]b-cpu[]] score: 50 -> 100 (+100.0%); tolerance 5%",
        ]
    )

    second = path.read_text()
    everything = pytester.runpytest("-o", "gpuperf_update_all=true", *FLAGS)  # implies --gpuperf-update
    everything.assert_outcomes(passed=2)
    assert _changed_lines(second, path.read_text()) == ["-      value: 1000000", "+      value: 1010000"]


def test_a_failing_test_never_becomes_its_own_baseline(pytester: pytest.Pytester) -> None:
    _setup(
        pytester,
        {
            "good": {"mem": 10, "score": 1.0, "kind": "x"},
            "wrong": {"mem": 5, "score": 9.0, "kind": "x", "fail": True},
        },
    )
    result = pytester.runpytest("--gpuperf-update", *FLAGS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "gpuperf: 2 tests, 6 metrics: 3 recorded, 3 not recorded (test failed) (*)",
            "*baselines not recorded for 1 test(s) that did not pass: *test_case[[]*wrong*[]] (failed)*",
        ]
    )
    tests = yaml.safe_load(_file(pytester).read_text())["tests"]
    assert len(tests) == 1 and "good" in next(iter(tests))


BAD_RECORDS = """
import math
import numpy as np
import pytest
import torch

BAD = {
    "none": lambda g: g.record("m", None),
    "list": lambda g: g.record("m", [1, 2]),
    "unit": lambda g: g.record("m", 1.0, unit=123),
    "nan": lambda g: g.record("m", math.nan),
    "inf": lambda g: g.record("m", -math.inf),
    "negative_bytes": lambda g: g.record("m", -5, unit="B"),
    "vector": lambda g: g.record("m", torch.ones(3)),
}

@pytest.mark.parametrize("case", sorted(BAD))
def test_bad(gpuperf, case):
    BAD[case](gpuperf)

def test_scalars_are_converted(gpuperf):
    gpuperf.record("tensor", torch.tensor(3.0))
    gpuperf.record("numpy", np.float32(2.5), unit="B")
"""


def test_a_bad_recorded_value_fails_only_its_own_test_and_never_reaches_the_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=BAD_RECORDS)
    result = pytester.runpytest("--gpuperf-update", *FLAGS)
    result.assert_outcomes(passed=1, failed=7)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not INTERNALERROR: the session went on
    result.stdout.fnmatch_lines(  # in the order pytest reports them: by test id
        [
            "*Error: *gpuperf.record('m'): value must be a finite number, got nan",
            "*Error: *gpuperf.record('m'): value must be >= 0, got -5",
            "*Error: test_bad.py::test_bad[[]*none*[]]: gpuperf.record('m'): value must be a number, got None",
            "*TypeError: *gpuperf.record('m'): unit must be a string, got 123",
            "*Error: *gpuperf.record('m'): value must be a single number, got an array of shape (3,)",
        ]
    )
    tests = yaml.safe_load(_file(pytester).read_text())["tests"]
    assert tests == {
        "test_bad.py::test_scalars_are_converted[cpu]": {  # only the test whose values were valid
            "numpy": {"value": 2.5, "unit": "B", "better": "lower", "kind": "memory"},
            "tensor": {"value": 3.0, "unit": "", "better": "lower", "kind": "custom"},
        }
    }
    pytester.runpytest("--gpuperf", *FLAGS, "-k", "converted").assert_outcomes(passed=1)  # the reader takes it


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("value: 50.0", "value: .nan", "value must be a finite number, got nan"),
        ("value: 2000000", "value: -5", r"value must be >= 0, got -5 (kind memory)"),
        ("value: 2000000", "value: fast", "value must be a number, got 'fast' (kind memory)"),
    ],
)
def test_a_baseline_value_that_would_switch_the_gate_off_fails_naming_file_line_test_and_metric(
    pytester: pytest.Pytester, old: str, new: str, message: str
) -> None:
    _setup(pytester, {"b": {"mem": 2_000_000, "score": 50.0, "kind": "x"}})
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=1)
    path = _file(pytester)
    text = path.read_text()
    metric = "score" if "50" in old else "mem"
    line = text.splitlines().index(f"    {metric}:") + 1
    path.write_text(text.replace(old, new))
    result = pytester.runpytest("--gpuperf", *FLAGS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*{path.name}:{line}: metric '{metric}' of 'test_rec.py::test_case[[]*b*[]]': {message}*"]
    )
    result.stdout.no_fnmatch_line("*performance regression*")
    assert path.read_text() == text.replace(old, new)  # untouched


def test_a_failed_write_says_so_and_never_claims_the_baselines_were_recorded(pytester: pytest.Pytester) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}})
    pytester.makeconftest(
        """
        import pytest_gpuperf.baselines.store as store

        def _refuse(path, text):
            raise PermissionError(13, "Permission denied", str(path))

        store.atomic_write_text = _refuse
        """
    )
    result = pytester.runpytest("--gpuperf-update", *FLAGS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*pytest-gpuperf: baselines not recorded: *Permission denied*"])
    result.stdout.no_fnmatch_line("*baselines recorded in*")


def test_a_baselines_path_that_is_a_file_is_one_usage_error(pytester: pytest.Pytester) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}})
    (pytester.path / "baselines").write_text("not a folder")
    result = pytester.runpytest("--gpuperf", *FLAGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the baselines path *baselines is a file, not a directory*"])


def test_a_moved_rootdir_is_reported_loudly_with_the_closest_keys_and_the_stale_entries(
    pytester: pytest.Pytester,
) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}, "b": {"mem": 2, "score": 2.0, "kind": "x"}})
    shared = pytester.path.parent / f"{pytester.path.name}-shared-baselines"
    pytester.runpytest(f"--gpuperf-baselines={shared}", "--gpuperf-update", *FLAGS).assert_outcomes(passed=2)
    result = pytester.runpytest("--gpuperf-baselines", str(shared), "--gpuperf", *FLAGS, "test_rec.py")
    result.assert_outcomes(passed=2)
    name = pytester.path.name
    result.stdout.fnmatch_lines(
        [
            "*gpuperf: tests found no entry in the baseline file of this hardware*",
            f"none of the 2 perf test(s) that used *{shared.name}/cpu-*.yaml matched any of its 2 entries",
            f"rootdir (test ids are relative to it): {pytester.path.parent}",
            "pytest found no config file and took the value of `--gpuperf-baselines *` for a test path*",
            "closest keys in the file:",
            f"  {name}/test_rec.py::test_case[[]*a*[]]  <-  test_rec.py::test_case[[]*a*[]]",
            "*gpuperf stale baseline entries*",
            "*cpu-*.yaml: 2 entries no test matched:",
            "  test_rec.py::test_case[[]*a*[]]",
            "  test_rec.py::test_case[[]*b*[]]",
        ]
    )


def test_a_renamed_test_lists_its_old_entry_as_stale(pytester: pytest.Pytester) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}, "b": {"mem": 2, "score": 2.0, "kind": "x"}})
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=2)
    (pytester.path / "values.json").write_text(
        json.dumps({"a": {"mem": 1, "score": 1.0, "kind": "x"}, "b2": {"mem": 2, "score": 2.0, "kind": "x"}})
    )
    result = pytester.runpytest("--gpuperf", *FLAGS)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "1 of 2 perf test(s) found no entry in *cpu-*.yaml (2 entries)",
            "  test_rec.py::test_case[[]*b2*[]]  <-  test_rec.py::test_case[[]b-cpu[]]",
            "*cpu-*.yaml: 1 entry no test matched:",
            "  test_rec.py::test_case[[]b-cpu[]]",
        ]
    )
    quiet = pytester.runpytest("--gpuperf", *FLAGS, "-k", "not b2")  # a deselected test's entry is not stale
    quiet.assert_outcomes(passed=1)
    quiet.stdout.no_fnmatch_line("*b2*<-*")


def test_tests_left_out_by_a_node_id_selection_are_not_stale(pytester: pytest.Pytester) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}, "b": {"mem": 2, "score": 2.0, "kind": "x"}})
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=2)
    result = pytester.runpytest("--gpuperf", *FLAGS, "test_rec.py::test_case[a-cpu]")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*stale baseline entries*")  # test_case[b-cpu] exists; the command line left it out


def test_a_brand_new_test_file_run_alone_is_not_a_mismatch(pytester: pytest.Pytester) -> None:
    _setup(pytester, {"a": {"mem": 1, "score": 1.0, "kind": "x"}})
    pytester.runpytest("--gpuperf-update", *FLAGS).assert_outcomes(passed=1)
    pytester.makepyfile(test_new="def test_fresh(gpuperf):\n    gpuperf.record('mem', 5.0, 'B', 'lower')\n")
    result = pytester.runpytest("--gpuperf", *FLAGS, "test_new.py")  # the other file's entries are not its keys
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*found no entry*")
    result.stdout.no_fnmatch_line("*<-*")


def test_xdist_workers_keep_unchanged_entries_and_the_controller_adds_up_what_each_wrote(
    pytester: pytest.Pytester,
) -> None:
    values = {name: {"mem": 1000 * (i + 1), "score": 1.0 + i, "kind": "x"} for i, name in enumerate("abcdef")}
    _setup(pytester, values)
    first = pytester.runpytest("-n", "2", "--gpuperf-update", *FLAGS)
    first.assert_outcomes(passed=6)
    first.stdout.fnmatch_lines(["*baselines recorded in: *cpu-*.yaml: 6 test(s), 18 entr(ies) written, 0 kept*"])
    path = _file(pytester)
    text = path.read_text()
    again = pytester.runpytest("-n", "2", "--gpuperf-update", *FLAGS)
    again.assert_outcomes(passed=6)
    assert path.read_text() == text
    again.stdout.fnmatch_lines(["*: 6 test(s), 0 entr(ies) written, 18 kept within tolerance -- unchanged*"])
