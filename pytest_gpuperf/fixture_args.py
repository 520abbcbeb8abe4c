"""The arguments of ``gpuperf.measure()`` and ``gpuperf.record()`` checked: each refusal names the test and the
argument, before anything is measured or recorded (an argument that would switch a gate off is an error)."""

from __future__ import annotations

import math

from pytest_gpuperf.results import KIND_CUSTOM, KIND_MEMORY, Metric


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
    from pytest_gpuperf.baselines.fields import MAX_METRIC_NAME, name_problem

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
    from pytest_gpuperf.baselines.fields import MAX_METRIC_NAME, MAX_WORD, name_problem
    from pytest_gpuperf.validate import finite_number, non_negative_number

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
        problem = name_problem(value, "a category value", MAX_METRIC_NAME)
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
