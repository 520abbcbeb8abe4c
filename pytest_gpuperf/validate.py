"""Numbers that reach the gate: one place that says what a valid one is.

A NaN, an infinity or an impossible negative value switches a comparison off
(every ``x > nan`` is False), so every number read from a baseline file, a
marker or ``gpuperf.record()`` passes through these helpers. Each raises
:class:`NumberError` (a ``ValueError``) whose message starts with ``what``, so
the caller only has to say where the number came from (file and line, test,
metric or marker key). Names (metric names, units, test ids) are checked here
too, and so are the arguments of ``gpuperf.measure()`` and ``gpuperf.record()``:
each refusal names the test and the argument before anything is measured or
recorded. Nothing heavy is imported here: the plugin module may use it at start-up.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_gpuperf.results import KIND_CUSTOM, KIND_MEMORY, Metric


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


#: Longest integer accepted anywhere (a peak of 10^20 bytes has 21 digits); the baseline reader refuses longer
#: ones, so the writer must too.
MAX_INT_DIGITS = 30


def _scalar(value: Any, what: str) -> int | float:
    """``value`` as a plain int or float; 0-d tensors and numpy scalars are converted with ``float()``."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        raise NumberError(f"{what} must be a number, got {value!r}")
    if isinstance(value, int):
        digits = integer_digits(int(value))
        if digits > MAX_INT_DIGITS:
            raise NumberError(
                f"{what} must be a finite number, got an integer of {digits} digits (at most {MAX_INT_DIGITS})"
            )
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


# -- names: metric names, units, test ids ------------------------------------------------------------------------

#: Longest unit, kind or method string (they are short words; more is a broken or hostile file).
MAX_WORD = 64
#: Longest metric name (``step.time``, ``rank3.train.tokens_per_s``: a name is a short dotted label).
MAX_METRIC_NAME = 200
#: Longest category value (a bound class, a dtype: a short word; a million characters flooded the terminal).
MAX_CATEGORY = 200
#: Longest test id read from a baseline file (pytest ids with long parametrizations stay far below).
MAX_TEST_ID = 4096


def name_problem(name: Any, what: str = "metric name", limit: int = MAX_METRIC_NAME) -> str | None:
    """What is wrong with a metric name or test id (None when valid): a non-empty printable string, bounded.

    Escape codes, carriage returns and newlines would reach the terminal and the FAILED line raw and let a
    log be spoofed; the name is shown with ``repr`` here, so the message itself is safe.
    """
    if not isinstance(name, str):
        return f"{what} must be a string, got {type(name).__name__} {name!r:.80}"
    if not name.strip():
        return f"{what} must not be empty"
    if len(name) > limit:
        return f"{what} is {len(name)} characters long, more than {limit}: {name[:60]!r}..."
    if not name.isprintable():
        bad = next(c for c in name if not c.isprintable())
        return f"{what} {name[:limit]!r} holds the unprintable character {bad!r} (escape codes, newlines, CR)"
    return None


# -- the arguments of gpuperf.measure() and gpuperf.record() -----------------------------------------------------


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (a 400-digit count)
        return False


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a tensor's repr is its whole contents)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_measure_args(
    node_id: str, name: str, items: float | None, flops: float | None, bytes_moved: float | None
) -> None:
    """Refuse arguments that would switch a gate off or make no sense, naming the test and the argument."""
    __tracebackhide__ = True  # the error is the caller's: pytest shows the test's line, not this one
    if not isinstance(name, str) or not name or name.strip() != name:
        raise ValueError(f"{node_id}: gpuperf.measure(name={name!r}): expected a non-empty name without spaces around")
    problem = name_problem(name, "name", MAX_METRIC_NAME - 40)  # room for '.peak_memory' and the like
    if problem:
        raise ValueError(f"{node_id}: gpuperf.measure(): {problem}")
    for key, value in (("items", items), ("flops", flops), ("bytes_moved", bytes_moved)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value <= 0:
            raise ValueError(
                f"{node_id}: gpuperf.measure({key}={value!r:.40}): expected a finite number > 0 per step "
                f"(or leave it out); {key}=0 would turn its metric into a division by zero"
            )


def checked_record_args(
    node_id: str,
    metrics: list[Metric],
    recorded_names: set[str],
    name: object,
    value: object,
    unit: object,
    better: object,
) -> tuple[float | str, str]:
    """``gpuperf.record()``'s arguments checked (``metrics``: the test's so far): the value as a plain number
    or word, and the metric's kind."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"{node_id}: gpuperf.record(): name must be a non-empty string, got {name!r}")
    problem = name_problem(name)
    if problem:
        raise ValueError(f"{node_id}: gpuperf.record(): {problem}")
    what = f"{node_id}: gpuperf.record({name!r})"
    taken = next((m for m in metrics if m.name == name), None)
    if taken is not None:
        source = "an earlier gpuperf.record()" if name in recorded_names else "gpuperf.measure()"
        raise ValueError(
            f"{what}: this test already has a metric {name!r} (from {source}); one name is one metric, "
            "give this one its own name"
        )
    if better not in ("lower", "higher", "equal"):
        raise ValueError(f"{what}: better must be 'lower', 'higher' or 'equal', got {better!r}")
    if not isinstance(unit, str):
        raise TypeError(f"{what}: unit must be a string, got {unit!r}")
    problem = name_problem(unit, "unit", MAX_WORD) if unit else None
    if problem:
        raise ValueError(f"{what}: {problem}")
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{what}: a category value must be a non-empty word, got {value!r}")
        problem = name_problem(value, "a category value", MAX_CATEGORY)
        if problem:
            raise ValueError(f"{what}: {problem}")
        return value, "category"
    if unit == "B":
        return non_negative_number(value, f"{what}: value"), KIND_MEMORY
    return finite_number(value, f"{what}: value"), KIND_CUSTOM


def is_integer(value: object) -> bool:
    """True for a Python or numpy integer (not a bool): a count, compared exactly under ``better="equal"``."""
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
