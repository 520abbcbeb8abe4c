"""Issue 24: a baseline file says one thing per key, every field a verdict reads is checked, only files are read."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_gpuperf.baselines import BaselineError, load_baseline_file, parse_baseline_text
from pytest_gpuperf.baselines.fields import ENTRY_FIELDS

HEAD = "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  t.py::a:\n"
TIME = "    step.time: {value: 0.5, unit: s, better: lower, kind: time, samples: [0.5, 0.5, 0.6]}\n"


# -- duplicate keys, at any level --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "line", "key", "first"),
    [
        pytest.param(
            HEAD + "    step.time:\n      value: 0.5\n      kind: time\n      value: 0.01\n",
            8,
            "value",
            6,
            id="a second value line",
        ),
        pytest.param(HEAD + TIME + TIME.replace("0.5", "9.5"), 6, "step.time", 5, id="a repeated metric"),
        pytest.param(HEAD + TIME + "  t.py::a:\n" + TIME, 6, "t.py::a", 4, id="a repeated test block"),
        pytest.param(HEAD + TIME + "tests: {}\n", 6, "tests", 3, id="a trailing tests: {}"),
        pytest.param(
            "schema_version: 1\nfingerprint: {backend: cpu, backend: cuda}\ntests: {}\n",
            2,
            "backend",
            2,
            id="a repeated fingerprint field",
        ),
        pytest.param(
            HEAD.replace("schema_version: 1\n", "schema_version: 1\nschema_version: 1\n"),
            2,
            "schema_version",
            1,
            id="a repeated schema_version",
        ),
    ],
)
def test_a_key_given_twice_is_refused_naming_file_line_and_the_first_line(
    tmp_path: Path, text: str, line: int, key: str, first: int
) -> None:
    with pytest.raises(BaselineError, match=rf"x.yaml:{line}: duplicate key '{key}' \(first on line {first}"):
        parse_baseline_text(tmp_path / "x.yaml", text)


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        pytest.param(HEAD + "    step.time: &t {value: 0.5, kind: time}\n", 5, "anchor &t", id="anchor"),
        pytest.param(
            HEAD + "    step.time: &t {value: 0.5, kind: time}\n    other.time: *t\n", 5, "anchor &t", id="alias"
        ),
        pytest.param(
            HEAD + "    step.time: {<<: {value: 9.0}, value: 0.5, kind: time}\n", 5, "merge key '<<'", id="merge"
        ),
        pytest.param(HEAD + "    ? [a, b]\n    : {value: 1}\n", 5, "mapping key must be a plain word", id="list key"),
        pytest.param(HEAD + "    1: {value: 1}\n", 5, r"mapping key must be a word, got '1' \(int\)", id="int key"),
    ],
)
def test_anchors_aliases_merge_keys_and_odd_keys_are_refused_with_their_line(
    tmp_path: Path, text: str, line: int, expected: str
) -> None:
    with pytest.raises(BaselineError, match=rf"x.yaml:{line}: .*{expected}"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_a_yaml_alias_bomb_is_refused_before_anything_expands(tmp_path: Path) -> None:
    levels = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 elements expanded
    text = "schema_version: 1\nfingerprint: {backend: cpu}\n" + "\n".join(levels) + "\ntests: {}\n"
    assert len(text) < 5000
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    with pytest.raises(BaselineError, match=r"bomb.yaml:3: anchor &a0 \(aliases and anchors are not read"):
        load_baseline_file(path)


def test_stars_and_ampersands_inside_quoted_ids_are_not_aliases(tmp_path: Path) -> None:
    text = "schema_version: 1\nfingerprint: {backend: cpu}\ntests:\n  't.py::a[x*y&z]':\n" + TIME
    loaded = parse_baseline_text(tmp_path / "x.yaml", text)
    assert list(loaded.tests) == ["t.py::a[x*y&z]"]


# -- integers Python cannot turn into a float ----------------------------------------------------------------------
@pytest.mark.parametrize("digits", [400, 5000])
def test_a_huge_integer_is_an_error_naming_file_and_line_not_an_overflow(tmp_path: Path, digits: int) -> None:
    text = HEAD + "    step.peak_memory:\n      kind: memory\n      value: " + "9" * digits + "\n"
    with pytest.raises(BaselineError, match=rf"x.yaml:7: an integer of {digits} digits"):
        parse_baseline_text(tmp_path / "x.yaml", text)


# -- every field a verdict reads is checked (one table) --------------------------------------------------------
FLAGS = ("power_capped",)
EVIDENCE = [
    row.name
    for row in ENTRY_FIELDS
    if row.name not in ("kind", "unit", "better", "method", "value", "samples", *FLAGS)
]


@pytest.mark.parametrize("bad", ["1", "0", "yes-please", "1.5", "[true]"])
def test_a_flag_field_refuses_anything_but_true_or_false(tmp_path: Path, bad: str) -> None:
    text = HEAD + f"    step.time: {{value: 0.5, unit: s, kind: time, power_capped: {bad}}}\n"
    with pytest.raises(BaselineError, match="power_capped must be true or false"):
        parse_baseline_text(tmp_path / "x.yaml", text)
    ok = HEAD + "    step.time: {value: 0.5, unit: s, kind: time, power_capped: true}\n"
    parse_baseline_text(tmp_path / "y.yaml", ok)


@pytest.mark.parametrize("name", EVIDENCE)
@pytest.mark.parametrize("bad", [".inf", "-.inf", ".nan", "-1", "fast", "true", "1e400"])
def test_every_evidence_field_refuses_what_would_switch_a_check_off(tmp_path: Path, name: str, bad: str) -> None:
    text = HEAD + f"    step.time: {{value: 0.5, unit: s, kind: time, {name}: {bad}}}\n"
    with pytest.raises(BaselineError, match=rf"x.yaml:5: metric 'step.time' of 't.py::a': {name} must be"):
        parse_baseline_text(tmp_path / "x.yaml", text)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("process_spread", "11", "process_spread must be <= 1"),
        ("sm_clock_mhz", "0", "sm_clock_mhz must be > 0"),
        ("sm_clock_mhz", "1000000000", "sm_clock_mhz must be <= 100000"),
        ("processes", "0", "processes must be a whole number >= 1"),
        ("processes", "2.5", "processes must be a whole number >= 1"),
        ("method", '"a\\x1b[2Jb"', "method must be a short printable word"),
        ("kind", "[time]", "kind must be a string"),
    ],
)
def test_fields_out_of_range_are_schema_errors_naming_the_field(
    tmp_path: Path, field: str, value: str, expected: str
) -> None:
    text = (
        HEAD + f"    step.time: {{value: 0.5, unit: s, {'' if field == 'kind' else 'kind: time, '}{field}: {value}}}\n"
    )
    with pytest.raises(BaselineError, match=rf"x.yaml:5: .*{expected}"):
        parse_baseline_text(tmp_path / "x.yaml", text)


def test_valid_evidence_fields_are_read() -> None:
    text = HEAD + (
        "    step.time: {value: 0.5, unit: s, kind: time, samples: [0.5, 0.6, 0.7], sm_clock_mhz: 1980,"
        " process_spread: 0.04, processes: 3, min_detectable_change: 0.08, noise_bound: 0.02}\n"
    )
    entry = parse_baseline_text(Path("x.yaml"), text).tests["t.py::a"]["step.time"]
    assert (entry["sm_clock_mhz"], entry["process_spread"], entry["processes"]) == (1980, 0.04, 3)


def test_the_noise_figures_of_an_entry_judged_at_a_huge_tolerance_are_read() -> None:
    """``--gpuperf-cpu-time-tolerance 100`` records a smallest detectable slowdown above 100: the file stays valid."""
    text = HEAD + "    step.time: {value: 0.5, unit: s, kind: time, min_detectable_change: 137.5, noise_bound: 120.0}\n"
    entry = parse_baseline_text(Path("x.yaml"), text).tests["t.py::a"]["step.time"]
    assert (entry["min_detectable_change"], entry["noise_bound"]) == (137.5, 120.0)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("'step\\x1b[31m.time'", "holds the unprintable character '\\\\x1b'"),
        ("'step\\r.time'", "holds the unprintable character '\\\\r'"),
        ("'a\\nb'", "holds the unprintable character '\\\\n'"),
        ("'" + "m" * 201 + "'", "is 201 characters long, more than 200"),
    ],
)
def test_metric_names_in_a_file_must_be_printable_and_bounded(tmp_path: Path, name: str, expected: str) -> None:
    text = HEAD + f'    "{name[1:-1]}": {{value: 1}}\n'
    with pytest.raises(BaselineError, match=rf"x.yaml:5: .*metric name .*{expected}"):
        parse_baseline_text(tmp_path / "x.yaml", text)


# -- loosening any such field is listed by --gpuperf-baseline-ref --------------------------------------------------
BEFORE = {"value": 1.0, "better": "lower", "kind": "time", "samples": [1.0, 1.1, 1.2]}


@pytest.mark.parametrize(
    ("before", "after", "fields"),
    [
        (BEFORE, {**BEFORE, "process_spread": 0.5}, ["process_spread"]),  # added: a band that excuses slowdowns
        ({**BEFORE, "process_spread": 0.02}, {**BEFORE, "process_spread": 0.9}, ["process_spread"]),
        ({**BEFORE, "process_spread": 0.9}, {**BEFORE, "process_spread": 0.02}, []),  # tighter
        (BEFORE, {**BEFORE, "sm_clock_mhz": 1000}, ["sm_clock_mhz"]),  # added: every run reads "another machine"
        ({**BEFORE, "sm_clock_mhz": 1980}, {**BEFORE, "sm_clock_mhz": 1000}, ["sm_clock_mhz"]),
        ({**BEFORE, "sm_clock_mhz": 1980}, {**BEFORE, "sm_clock_mhz": 1985}, []),  # within the 3% the rule allows
        ({**BEFORE, "sm_clock_mhz": 1980}, BEFORE, []),  # removed: nothing is excused any more
        ({**BEFORE, "mem_clock_mhz": 2619}, {**BEFORE, "mem_clock_mhz": 1593}, ["mem_clock_mhz"]),
        ({**BEFORE, "mem_clock_mhz": 2619}, {**BEFORE, "mem_clock_mhz": 2620}, []),
        ({**BEFORE, "calibration": 2.6e-5}, {**BEFORE, "calibration": 4.2e-5}, ["calibration"]),
        ({**BEFORE, "calibration_spread": 0.02}, {**BEFORE, "calibration_spread": 5.0}, ["calibration_spread"]),
        (BEFORE, {**BEFORE, "process_spread": float("inf")}, ["entry"]),  # refused by the reader
        (BEFORE, {**BEFORE, "better": "higher"}, ["better"]),
        (BEFORE, {**BEFORE, "value": 2.0, "samples": [2.0, 2.2, 2.4]}, ["value", "samples"]),
        (BEFORE, {**BEFORE, "value": 2.0}, ["entry"]),  # samples that disagree with the value: refused
        (BEFORE, {**BEFORE, "method": "wall"}, ["method"]),  # another clock than the calibration was taken with
    ],
)
def test_an_edit_that_loosens_any_evidence_field_is_named(before: dict, after: dict, fields: list[str]) -> None:
    from pytest_gpuperf.baselines.diff import diff_tests, loosening

    assert loosening(before, after) == fields
    [change] = diff_tests("b.yaml", {"t": {"m": before}}, {"t": {"m": after}})
    assert change.loosens is bool(fields)
    if fields and fields != ["value"]:
        assert f"loosened by: {', '.join(fields)}" in change.detail


# -- only regular files, and only what the cap allows -------------------------------------------------------------
def test_a_fifo_is_refused_at_once_instead_of_hanging(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    os.mkfifo(path)
    started = time.monotonic()
    with pytest.raises(BaselineError, match=r"cpu.yaml: is a FIFO \(named pipe\), not a regular file"):
        load_baseline_file(path)
    assert time.monotonic() - started < 5  # no writer ever opens it: a blocking open would wait forever


def test_a_symlink_to_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(BaselineError, match=r"cpu.yaml: is a character device, not a regular file"):
        load_baseline_file(path)


def test_the_size_cap_applies_to_what_is_read_not_to_what_stat_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.baselines import schema
    from pytest_gpuperf.baselines.strict_yaml import TooLarge, read_regular_file

    proc_file = Path("/proc/self/maps")  # a regular file whose stat size is 0 but which holds kilobytes
    assert proc_file.stat().st_size == 0
    with pytest.raises(TooLarge) as raised:
        read_regular_file(proc_file, 100)
    assert raised.value.size == 101  # cap + 1 bytes read, never more
    path = tmp_path / "cpu.yaml"
    path.symlink_to(proc_file)
    monkeypatch.setattr(schema, "MAX_FILE_BYTES", 100)
    with pytest.raises(BaselineError, match=r"cpu.yaml: holds more than the 100 bytes read for a baseline"):
        load_baseline_file(path)


# -- each file parsed once per process --------------------------------------------------------------------------
def test_an_unchanged_file_is_parsed_once_and_a_replaced_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.baselines import schema, update_baseline_file

    path = tmp_path / "cpu.yaml"
    update_baseline_file(path, {"backend": "cpu"}, {"t::a": {"m": {"value": 1}}})
    calls = []
    real = schema.parse_baseline_text
    monkeypatch.setattr(schema, "parse_baseline_text", lambda p, t, *a: calls.append(p) or real(p, t, *a))
    first = load_baseline_file(path)
    assert load_baseline_file(path) is first and len(calls) == 1
    update_baseline_file(path, {"backend": "cpu"}, {"t::a": {"m": {"value": 2}}})  # atomic rename: a new inode
    assert len(calls) == 2  # the writer re-reads under its lock, never from the cache
    assert load_baseline_file(path).tests["t::a"]["m"]["value"] == 2  # type: ignore[union-attr]
    assert len(calls) == 3


# -- yaml imported a second time in one process -------------------------------------------------------------------
def test_a_baseline_is_read_after_yaml_was_dropped_from_sys_modules_and_imported_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytester's in-process runs drop the modules a run imported first; libyaml's C binding is loaded once per
    process and stays bound to the first ``yaml`` package, so the reader must not mix it with a second one."""
    import sys

    import yaml  # the first import (or the suite's): the one the C binding belongs to

    for name in [n for n in sys.modules if n == "yaml" or n.startswith(("yaml.", "_yaml"))]:
        monkeypatch.delitem(sys.modules, name)  # put back as they were at teardown
    import yaml as again

    assert again is not yaml
    text = HEAD + TIME
    parsed = parse_baseline_text(Path("b.yaml"), text)
    assert parsed.tests["t.py::a"]["step.time"]["samples"] == [0.5, 0.5, 0.6]
    assert parsed.fingerprint == {"backend": "cpu"}
    with pytest.raises(BaselineError, match=r"b\.yaml:7: duplicate key 'value' \(first on line 6"):
        parse_baseline_text(Path("b.yaml"), HEAD + "    step.time:\n      value: 0.5\n      value: 0.6\n")
    # a parse error is raised with the binding's classes, and still reported with its line
    with pytest.raises(BaselineError, match=r"b\.yaml:6: not valid YAML \(did not find expected"):
        parse_baseline_text(Path("b.yaml"), HEAD + "    step.time: {value: [0.5\n")


# -- end to end: an edited baseline never lets a slowdown pass -----------------------------------------------------
TIMED = """
import torch

def test_step(gpuperf):
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    gpuperf.measure(lambda: a @ a)
"""


def _recorded(pytester: pytest.Pytester, fast_args: list[str]) -> Path:
    pytester.makepyfile(test_timed=TIMED)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    return path


def _edit_step_time(path: Path, **fields: object) -> None:
    import yaml

    data = yaml.safe_load(path.read_text())
    [entries] = data["tests"].values()
    entries["step.time"].update(fields)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_process_spread_of_inf_fails_the_run_instead_of_excusing_a_slowdown(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    path = _recorded(pytester, fast_args)
    _edit_step_time(path, process_spread=float("inf"))
    before = path.read_bytes()
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*.yaml:*: metric 'step.time' of *: process_spread must be a finite number, got inf*"])
    assert path.read_bytes() == before


def test_a_duplicate_value_line_fails_the_run_naming_the_line(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    path = _recorded(pytester, fast_args)
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.strip() == "step.time:")
    lines.insert(at + 2, "      value: 100.0\n")  # a second value: below the first
    path.write_text("".join(lines))
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{path.name}:{at + 3}: duplicate key 'value' (first on line {at + 2}*"])


def test_the_ref_diff_lists_a_larger_process_spread_and_another_clock_as_loosening(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    from tests.test_baseline_ref import git

    git(pytester.path, "init", "-q", "-b", "main")
    path = _recorded(pytester, fast_args)
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "baselines")
    _edit_step_time(path, process_spread=0.9, sm_clock_mhz=900)
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-baseline-ref", "main")
    result.stdout.fnmatch_lines(
        ["*step.time*loosened by: sm_clock_mhz, process_spread*[[]LOOSENS THE GATE[]]*"], consecutive=False
    )


def test_a_session_parses_each_baseline_file_once(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.baselines import schema

    path = _recorded(pytester, fast_args)
    path.write_text(path.read_text() + "\n")  # a new inode and size: nothing cached from the recording run
    calls: list[str] = []
    real = schema.parse_baseline_text
    monkeypatch.setattr(schema, "parse_baseline_text", lambda p, t, *a: calls.append(str(p)) or real(p, t, *a))
    pytester.runpytest_inprocess("--gpuperf", *unchanged_args).assert_outcomes(passed=1)  # in-process: calls counted
    assert calls.count(str(path)) == 1, calls  # judged, then the stale-entry summary: one parse
