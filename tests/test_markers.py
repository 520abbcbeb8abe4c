"""Marker validation (one function per marker), backend ids, module-scoped device fixtures, strict absent backends."""

from __future__ import annotations

import math

import pytest

from pytest_gpuperf.markers import (
    GPUPERF_MARKER_KEYS,
    MarkerError,
    check_items,
    declared_backends,
    gpuperf_marker,
    gpuperf_options,
)


def test_gpuperf_marker_returns_only_the_keys_given_checked() -> None:
    assert gpuperf_marker(time_tolerance={"cuda": 0.1, "cpu": 0}, min_samples=5.0) == {
        "time_tolerance": {"cuda": 0.1, "cpu": 0.0},
        "min_samples": 5,
    }
    assert gpuperf_marker(informational="throughput") == {"informational": ("throughput",)}
    assert "where" not in GPUPERF_MARKER_KEYS and "tolerances" in GPUPERF_MARKER_KEYS


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"time_tolerance": -0.1}, "t.py::t: @pytest.mark.gpuperf(time_tolerance=...) (a fraction >= 0, 0.05 = 5%)"),
        ({"memory_tolerance": "abc"}, "memory_tolerance=...) (a fraction >= 0, 0.05 = 5%) must be a number, got 'abc'"),
        ({"tolerance": math.nan}, "tolerance=...) (a fraction >= 0, 0.05 = 5%) must be a finite number, got nan"),
        ({"tolerance": {"cuda": -1}}, "tolerance=...)['cuda'] (a fraction >= 0, 0.05 = 5%) must be >= 0, got -1"),
        ({"tolerances": {"step.time": -1}}, "tolerances=...)['step.time'] (a fraction >= 0, 0.05 = 5%) must be >= 0"),
        ({"tolerances": 0.1}, "tolerances=...) maps metric names to tolerances"),
        ({"max_time": -1}, "max_time=...) (seconds, > 0) must be > 0, got -1"),
        ({"min_samples": 0}, "min_samples=...) must be a whole number >= 1, got 0"),
        ({"precision": 0}, "precision=...) (a relative half-width, > 0) must be > 0, got 0"),
        ({"bound": 3}, "bound=...) must be a bound class"),
        ({"informational": 3}, "informational=...) must be a metric name or a list of metric names"),
        (
            {"time_tolerence": 0.1},
            "got unknown argument(s) ['time_tolerence'] (did you mean time_tolerance?); known: ['bound'",
        ),
    ],
)
def test_bad_gpuperf_marker_arguments_name_the_test_the_key_and_the_range(kwargs: dict, message: str) -> None:
    with pytest.raises(MarkerError) as info:
        gpuperf_options("t.py::t", (), kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("t.py::t: @pytest.mark.gpuperf")


def test_positional_gpuperf_marker_arguments_are_refused() -> None:
    with pytest.raises(MarkerError, match="keyword arguments only"):
        gpuperf_options("t.py::t", (0.1,), {})


def test_gpuperf_backends_marker_needs_at_least_one_name() -> None:
    assert declared_backends("t", ("CUDA", "cpu"), {}) == ("cuda", "cpu")
    with pytest.raises(MarkerError, match=r"t: @pytest.mark.gpuperf_backends\(\) names no backend"):
        declared_backends("t", (), {})
    with pytest.raises(MarkerError, match="non-empty strings"):
        declared_backends("t", ("cuda", 3), {})
    with pytest.raises(MarkerError, match=r"unknown argument\(s\) \['backend'\]"):
        declared_backends("t", ("cuda",), {"backend": "x"})


def test_items_validator_for_measure() -> None:
    assert check_items(64, "measure(items=...)") == 64.0
    for bad in (0, -1, math.inf, "64", None):
        with pytest.raises(MarkerError, match=r"measure\(items=...\) \(items per step, > 0\) must be"):
            check_items(bad, "measure(items=...)")


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("gpuperf_backends()", "*test_step: @pytest.mark.gpuperf_backends() names no backend*"),
        ("gpuperf(time_tolerance='abc')", "*time_tolerance=...) (a fraction >= 0, 0.05 = 5%) must be a number*"),
        ("gpuperf(max_time=-1)", "*test_step: @pytest.mark.gpuperf(max_time=...) (seconds, > 0) must be > 0, got -1*"),
        ("gpuperf(min_samples=0)", "*min_samples=...) must be a whole number >= 1, got 0*"),
        ("gpuperf(tolerance=-0.05)", "*tolerance=...) (a fraction >= 0, 0.05 = 5%) must be >= 0, got -0.05*"),
    ],
)
def test_a_bad_marker_is_a_collection_error_with_the_message(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_step(gpuperf):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting*", message])
    result.stdout.fnmatch_lines(["*test_a_bad_marker_is_a_collection_error_with_the_message.py:3: *"])  # its line
    assert "Traceback" not in result.stdout.str() and "_pytest" not in result.stdout.str()


def test_the_backend_is_the_last_part_of_the_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [64, 128])
        def test_x(gpuperf, n):
            assert gpuperf.backend_name == "cpu"
        """
    )
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "test_the_backend_is_the_last_part_of_the_id.py")
    result.stdout.fnmatch_lines(["*test_x[[]64-cpu[]] PASSED*", "*test_x[[]128-cpu[]] PASSED*"])
    # the id selects one instance
    one = pytester.runpytest(
        "-v", "-p", "no:cacheprovider", "test_the_backend_is_the_last_part_of_the_id.py::test_x[64-cpu]"
    )
    one.assert_outcomes(passed=1)


def test_a_module_scoped_model_fixture_gets_the_device_once_per_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        BUILT = []

        @pytest.fixture(scope="module")
        def model(gpuperf_device, gpuperf_backend):
            BUILT.append(gpuperf_backend.name)
            return torch.nn.Linear(8, 8).to(gpuperf_device)

        @pytest.mark.parametrize("batch", [1, 4])
        def test_forward(gpuperf, model, batch):
            assert next(model.parameters()).device == gpuperf.device
            x = torch.randn(batch, 8, device=gpuperf.device)
            gpuperf.measure(lambda: model(x))

        def test_built_once():
            assert BUILT == ["cpu"]
        """
    )
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_forward[[]1-cpu[]] PASSED*", "*test_forward[[]4-cpu[]] PASSED*"])
    result.assert_outcomes(passed=3)


STEP = """
def test_step(gpuperf):
    gpuperf.measure(lambda: None)
"""


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="needs a machine without CUDA (the GPU runner has it)"
)
def test_strict_with_an_absent_requested_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(STEP)
    result = pytester.runpytest("--gpuperf", "--gpuperf-backend", "cuda", "--gpuperf-strict", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-backend cuda with --gpuperf-strict: the cuda backend is not available on this machine (*"]
    )
    # without --gpuperf-strict the instance is skipped, saying why
    lenient = pytester.runpytest("--gpuperf-backend", "cuda", "-rs", "-p", "no:cacheprovider")
    lenient.assert_outcomes(skipped=1)
    lenient.stdout.fnmatch_lines(["*SKIPPED*cuda backend not available*"])


COUNTING_CONFTEST = """
import pytest_gpuperf.markers as markers

CHECKED = []
_check = markers.gpuperf_options


def counting(node_id, args, kwargs):
    CHECKED.append(node_id)
    return _check(node_id, args, kwargs)


markers.gpuperf_options = counting
"""

CHECKED_ONCE = """
import sys

import pytest


@pytest.mark.gpuperf(max_time=0.5)
@pytest.mark.parametrize("n", [1, 2])
def test_a(gpuperf, n):
    assert gpuperf.options["max_time"] == 0.5 and gpuperf.context.options is gpuperf.options


@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.gpuperf(min_samples=0))])
def test_param_mark(gpuperf, n):
    pass


def test_checked_once():
    assert sys.modules["conftest"].CHECKED.count("test_checked_once.py::test_a") == 1
"""


def test_the_marker_is_checked_once_at_collection_and_its_options_reused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(test_checked_once=CHECKED_ONCE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=3, errors=1)  # a pytest.param's marker, unseen at collection: checked by the fixture
    result.stdout.fnmatch_lines(["*test_param_mark*min_samples=...) must be a whole number >= 1, got 0*"])
