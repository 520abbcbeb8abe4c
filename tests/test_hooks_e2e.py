"""Feature plugins extend the core through declared hooks (``pytest_gpuperf_*``), never through the session."""

from __future__ import annotations

import pytest

CONFTEST = """
from pytest_gpuperf.results import KIND_CATEGORY, Metric

SHAPE = {shape!r}


def pytest_gpuperf_after_measure(context):
    seen = context.baseline_value(context.name + ".shape")
    return [Metric(context.name + ".shape", SHAPE, "", "equal", KIND_CATEGORY, extra={{"seen": str(seen)}})]


def pytest_gpuperf_write_baselines(config):
    return None if SHAPE != "veto" else False
"""

TEST = """
def test_tiny(gpuperf):
    gpuperf.measure(lambda: sum(range(100)), memory=False)
"""


def test_a_hook_adds_a_metric_that_is_recorded_judged_and_can_fail(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makeconftest(CONFTEST.format(shape="square"))
    pytester.makepyfile(test_hook=TEST)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").glob("*.yaml")
    assert "step.shape" in path.read_text()
    pytester.runpytest("--gpuperf", *unchanged_args).assert_outcomes(passed=1)  # time is not what this is about
    pytester.makeconftest(CONFTEST.format(shape="round"))
    result = pytester.runpytest("--gpuperf", *unchanged_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*shape changed: square -> round*"])


def test_a_hook_can_veto_writing_baselines(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makeconftest(CONFTEST.format(shape="veto"))
    pytester.makepyfile(test_hook=TEST)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    assert not list((pytester.path / "baselines").glob("*.yaml"))
