"""Numbers that reach the gate: one place that says what a valid one is.

A NaN, an infinity or an impossible negative value switches a comparison off
(every ``x > nan`` is False), so every number read from a baseline file, a
marker or ``gpuperf.record()`` passes through these helpers. Each raises
:class:`NumberError` (a ``ValueError``) whose message starts with ``what``, so
the caller only has to say where the number came from (file and line, test,
metric or marker key). Nothing heavy is imported here: the plugin module may
use it at start-up.
"""

from __future__ import annotations

import math
from typing import Any


def number_or_none(value: Any) -> float | None:
    """``value`` as a float when it is a plain number (not a bool, not an int too large for a float), else None.

    For optional evidence fields that are read, not checked: a missing or odd one reads as absent.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


class NumberError(ValueError):
    """A number that the gate cannot use; the message names it (``what``) and the accepted range."""


def _scalar(value: Any, what: str) -> int | float:
    """``value`` as a plain int or float; 0-d tensors and numpy scalars are converted with ``float()``."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        raise NumberError(f"{what} must be a number, got {value!r}")
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            digits = integer_digits(int(value))
            raise NumberError(f"{what} must be a finite number, got an integer of {digits} digits") from None
        return int(value)
    if isinstance(value, float):
        return float(value)
    shape = getattr(value, "shape", None)
    if shape is not None and tuple(shape) != ():
        raise NumberError(f"{what} must be a single number, got an array of shape {tuple(shape)}")
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "b":  # numpy bool_
        raise NumberError(f"{what} must be a number, got {value!r}")
    if hasattr(value, "dtype") and "bool" in str(value.dtype):  # torch.bool tensor
        raise NumberError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise NumberError(f"{what} must be a number, got {type(value).__name__} {value!r}") from None


def integer_digits(value: int) -> int:
    """How many decimal digits ``value`` has (without ``str()``, which refuses more than 4,300)."""
    magnitude = abs(value)
    digits = max(1, int(magnitude.bit_length() * 0.30102999566398))
    return digits + 1 if magnitude >= 10**digits else digits


def finite_number(value: Any, what: str) -> int | float:
    """``value`` as an int or float when it is a finite real number; else :class:`NumberError` naming ``what``."""
    number = _scalar(value, what)
    if not math.isfinite(number):
        raise NumberError(f"{what} must be a finite number, got {number!r}")
    return number


def non_negative_number(value: Any, what: str) -> int | float:
    """A finite number >= 0 (peak memory, a tolerance, a count of bytes)."""
    number = finite_number(value, what)
    if number < 0:
        raise NumberError(f"{what} must be >= 0, got {number!r}")
    return number


def positive_number(value: Any, what: str) -> int | float:
    """A finite number > 0 (a time per step, a throughput, a budget in seconds)."""
    number = finite_number(value, what)
    if number <= 0:
        raise NumberError(f"{what} must be > 0, got {number!r}")
    return number


def tolerance(value: Any, what: str) -> float:
    """A tolerance fraction: finite and >= 0 (0.05 = 5%)."""
    return float(non_negative_number(value, what))


def positive_int(value: Any, what: str) -> int:
    """A whole number >= 1 (sample counts, items per step given as a count)."""
    number = finite_number(value, what)
    if number != int(number) or number < 1:
        raise NumberError(f"{what} must be a whole number >= 1, got {number!r}")
    return int(number)
