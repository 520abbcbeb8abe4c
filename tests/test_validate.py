"""Unit tests of the shared number validation (baselines, markers and record() use it)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pytest_gpuperf.validate import (
    NumberError,
    finite_number,
    non_negative_number,
    positive_int,
    positive_number,
    tolerance,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), (2.5, 2.5), (np.float32(1.5), 1.5), (np.int64(7), 7.0), (torch.tensor(3.0), 3.0), (-1, -1)],
)
def test_finite_numbers_are_returned_as_plain_python_numbers(value: object, expected: float) -> None:
    result = finite_number(value, "x")
    assert result == expected
    assert type(result) in (int, float)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "must be a finite number, got nan"),
        (math.inf, "must be a finite number, got inf"),
        (-math.inf, "must be a finite number"),
        (None, "must be a number, got None"),
        (True, "must be a number, got True"),
        ("1.5", "must be a number, got '1.5'"),
        ([1, 2], "must be a number"),
        (torch.tensor([1.0, 2.0]), r"single number, got an array of shape \(2,\)"),
        (np.array([1.0]), r"shape \(1,\)"),
        (torch.tensor(True), "must be a number"),
        (np.bool_(True), "must be a number"),
        (torch.tensor(float("nan")), "finite"),
    ],
)
def test_values_that_switch_the_gate_off_are_refused_naming_what(value: object, message: str) -> None:
    with pytest.raises(NumberError, match=r"^metric m of t .*" + message):
        finite_number(value, "metric m of t")


def test_ranges() -> None:
    assert non_negative_number(0, "x") == 0
    assert positive_number(1e-9, "x") == 1e-9
    assert tolerance(0.05, "x") == 0.05
    assert positive_int(30, "x") == 30
    with pytest.raises(NumberError, match="peak must be >= 0, got -5"):
        non_negative_number(-5, "peak")
    with pytest.raises(NumberError, match="time must be > 0, got 0"):
        positive_number(0, "time")
    with pytest.raises(NumberError, match="tol must be a finite number, got nan"):
        tolerance(float("nan"), "tol")
    with pytest.raises(NumberError, match="n must be a whole number >= 1, got 0"):
        positive_int(0, "n")
    with pytest.raises(NumberError, match="whole number"):
        positive_int(2.5, "n")
    assert isinstance(NumberError("x"), ValueError)
