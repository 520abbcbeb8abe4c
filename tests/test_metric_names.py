"""Issue 24: one namespace for a test's metric names; names, units and words printable and bounded; huge numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

TESTS = r"""
import torch

def _step():
    a = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    return lambda: a @ a

def test_record_over_measure(gpuperf):
    gpuperf.measure(_step())
    gpuperf.record("step.time", 123.0, "s")

def test_record_twice(gpuperf):
    gpuperf.record("m", 1.0)
    gpuperf.record("m", 2.0)

def test_measure_over_record(gpuperf):
    gpuperf.record("step.time", 1.0, "s")
    gpuperf.measure(_step())

def test_escape_in_name(gpuperf):
    gpuperf.record("ok\x1b[2K\rPASSED fake\nline", 1.0)

def test_escape_in_unit(gpuperf):
    gpuperf.record("u", 1.0, "s\x1b[31m")

def test_escape_in_category(gpuperf):
    gpuperf.record("c", "fast\r\nPASSED")

def test_long_name(gpuperf):
    gpuperf.record("m" * 201, 1.0)

def test_escape_in_measured_name(gpuperf):
    gpuperf.measure(_step(), name="s\x1b]0;title\x07")

def test_huge_integer(gpuperf):
    gpuperf.record("count", 10**400, better="equal")

def test_huge_items(gpuperf):
    gpuperf.measure(_step(), items=10**400)
"""

EXPECTED = {
    "test_record_over_measure": "this test already has a metric 'step.time' (from gpuperf.measure())",
    "test_record_twice": "this test already has a metric 'm' (from an earlier gpuperf.record())",
    "test_measure_over_record": "produces 'step.time', which an earlier gpuperf.record() in this test already used",
    "test_escape_in_name": r"metric name 'ok\x1b[2K\rPASSED fake\nline' holds the unprintable character '\x1b'",
    "test_escape_in_unit": r"unit 's\x1b[31m' holds the unprintable character '\x1b'",
    "test_escape_in_category": r"a category value 'fast\r\nPASSED' holds the unprintable character '\r'",
    "test_long_name": "metric name is 201 characters long, more than 200",
    "test_escape_in_measured_name": r"name 's\x1b]0;title\x07' holds the unprintable character '\x1b'",
    "test_huge_integer": "gpuperf.record('count'): value must be a finite number, got an integer of 401 digits",
    "test_huge_items": "gpuperf.measure(items=",
}


def test_each_name_is_one_metric_and_nothing_unprintable_reaches_the_terminal(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_names=TESTS)
    result = pytester.runpytest("--gpuperf-update", *fast_args, "-rf")
    result.assert_outcomes(failed=len(EXPECTED))
    output = result.stdout.str()
    for name, expected in EXPECTED.items():
        failed = [line for line in result.outlines if line.startswith(f"FAILED test_names.py::{name}")]
        assert failed, name
        assert expected in output, (name, expected)
    assert "\x1b" not in output and "\r" not in output and "\x07" not in output
    assert not any(line.startswith(("PASSED", "line")) for line in result.outlines), "a name spoofed a line"
    [path] = sorted((pytester.path / "baselines").glob("*.yaml")) or [None]  # type: ignore[list-item]
    assert path is None or "123" not in Path(path).read_text()


def test_a_recorded_name_never_overwrites_a_measured_baseline(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    """The issue's case: the baseline held 123 s for step.time and a 100x slower step read "improved -100%"."""
    pytester.makepyfile(test_names=TESTS)
    pytester.runpytest("--gpuperf-update", *fast_args, "-k", "record_over_measure")
    files = sorted((pytester.path / "baselines").glob("*.yaml"))
    for path in files:
        entries = yaml.safe_load(path.read_text())["tests"]
        assert all(e.get("step.time", {}).get("value") != 123.0 for e in entries.values())


@pytest.mark.parametrize("value", [10**400, -(10**400), 10**5000], ids=["400", "-400", "5000"])
def test_an_integer_too_large_for_a_float_is_a_number_error_not_an_overflow(value: int) -> None:
    from pytest_gpuperf.validate import NumberError, finite_number, positive_int

    digits = len(str(abs(value))) if abs(value) < 10**4000 else 5001
    for check in (finite_number, positive_int):
        expected = rf"^x must be a finite number, got an integer of {digits} digits \(at most 30\)$"
        with pytest.raises(NumberError, match=expected):
            check(value, "x")
