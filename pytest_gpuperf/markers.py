"""The markers' contracts: one validating function per marker, whose signature *is* the marker's.

``@pytest.mark.gpuperf(...)`` is checked by :func:`gpuperf_marker` and
``@pytest.mark.gpuperf_backends(...)`` by :func:`gpuperf_backends_marker` (the way
pytest-memray validates its markers): an unknown key, a positional argument, a negative,
non-finite or string tolerance, ``max_time=-1``, ``min_samples=0`` or an empty backend list
raises :class:`MarkerError` naming the test, the key and the accepted range. The plugin checks each
marker once, at collection (a usage error before anything runs), and hands its :class:`MarkerOptions` to the
``gpuperf`` fixture and the test's context, which take them as checked; options from elsewhere (a rank's task,
a plain dict) are checked when the context is built. Nothing heavy is imported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from difflib import get_close_matches
from typing import Any

from pytest_gpuperf.validate import NumberError, positive_int, positive_number
from pytest_gpuperf.validate import tolerance as tolerance_fraction


class MarkerError(ValueError):
    """A marker argument the plugin cannot use; the message names the test, the key and what is accepted."""


class MarkerOptions(Mapping[str, Any]):
    """The checked options of one ``@pytest.mark.gpuperf(...)``, read-only: what :func:`gpuperf_options` returns."""

    __slots__ = ("_options",)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self._options = dict(options or {})

    def __getitem__(self, key: str) -> Any:
        return self._options[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __repr__(self) -> str:
        return f"MarkerOptions({self._options!r})"


def marker_location(function: Any, marker: str, fallback: tuple[str, int] | None = None) -> str:
    """``file.py:LINE`` of ``@pytest.mark.<marker>`` on ``function`` (its first decorator line naming it).

    Falls back to ``fallback`` (a pytest location: path relative to the rootdir, 0-based line of the ``def``)
    when the source cannot be read or the marker comes from elsewhere (a module's ``pytestmark``, a class).
    """
    try:
        lines, start = inspect.getsourcelines(function)
        path = inspect.getsourcefile(function) or ""
    except (OSError, TypeError):
        lines, start, path = [], 0, ""
    for offset, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(("def ", "async def ")):
            break
        compact = stripped.replace(" ", "")
        if compact.startswith("@") and (f"mark.{marker}(" in compact or compact.endswith(f"mark.{marker}")):
            name = fallback[0] if fallback else path
            return f"{name}:{start + offset}"
    if fallback is not None:
        return f"{fallback[0]}:{fallback[1] + 1}"
    return f"{path}:{start}" if path else "?"


def _per_backend(value: Any, what: str, check: Callable[[Any, str], Any]) -> Any:
    """``value`` checked by ``check``, or a mapping ``{backend: value}`` with each entry checked."""
    if isinstance(value, Mapping):
        checked = {}
        for backend, item in value.items():
            if not isinstance(backend, str):
                raise MarkerError(f"{what} maps backend names to values; got key {backend!r}")
            checked[backend] = check(item, f"{what}[{backend!r}]")
        return checked
    return check(value, what)


def _names(value: Any, what: str) -> tuple[str, ...]:
    """A metric name or a list of them."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise MarkerError(f"{what} must be a metric name or a list of metric names, got {value!r}")


def _bound(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MarkerError(f"{what} must be a bound class (memory-bound, compute-bound or latency-bound), got {value!r}")
    return value


def _tolerance(value: Any, what: str) -> float:
    return tolerance_fraction(value, f"{what} (a fraction >= 0, 0.05 = 5%)")


def gpuperf_marker(
    time_tolerance: Any = None,
    memory_tolerance: Any = None,
    host_tolerance: Any = None,
    tolerance: Any = None,
    tolerances: Any = None,
    max_time: Any = None,
    min_samples: Any = None,
    precision: Any = None,
    bound: Any = None,
    informational: Any = None,
    *,
    where: str = "@pytest.mark.gpuperf",
) -> dict[str, Any]:
    """The checked keyword arguments of ``@pytest.mark.gpuperf`` (only those given); raises :class:`MarkerError`.

    Tolerances are fractions >= 0, each also a mapping per backend (``{"cuda": 0.1}``; ``host_tolerance``
    is the CUDA host overhead's);
    ``tolerances`` maps metric names to fractions; ``max_time`` (seconds) and ``precision``
    are > 0; ``min_samples`` is a whole number >= 1; ``bound`` a bound class, ``informational``
    metric names, both also per backend.
    """
    given = {
        "time_tolerance": time_tolerance,
        "memory_tolerance": memory_tolerance,
        "host_tolerance": host_tolerance,
        "tolerance": tolerance,
        "tolerances": tolerances,
        "max_time": max_time,
        "min_samples": min_samples,
        "precision": precision,
        "bound": bound,
        "informational": informational,
    }
    checks: dict[str, Callable[[Any, str], Any]] = {
        "time_tolerance": lambda v, w: _per_backend(v, w, _tolerance),
        "memory_tolerance": lambda v, w: _per_backend(v, w, _tolerance),
        "host_tolerance": lambda v, w: _per_backend(v, w, _tolerance),
        "tolerance": lambda v, w: _per_backend(v, w, _tolerance),
        "tolerances": _metric_tolerances,
        "max_time": lambda v, w: positive_number(v, f"{w} (seconds, > 0)"),
        "min_samples": positive_int,
        "precision": lambda v, w: positive_number(v, f"{w} (a relative half-width, > 0)"),
        "bound": lambda v, w: _per_backend(v, w, _bound),
        "informational": lambda v, w: _per_backend(v, w, _names),
    }
    checked: dict[str, Any] = {}
    for key, value in given.items():
        if value is None:
            continue
        try:
            checked[key] = checks[key](value, f"{where}({key}=...)")
        except NumberError as exc:
            raise MarkerError(str(exc)) from None
    return checked


def _metric_tolerances(value: Any, what: str) -> dict[str, float]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise MarkerError(f"{what} maps metric names to tolerances ({{'step.peak_memory': 0.1}}), got {value!r}")
    return {name: _tolerance(item, f"{what}[{name!r}]") for name, item in value.items()}


#: Marker keys whose values are tolerance fractions (each number, per backend or per metric).
TOLERANCE_KEYS = ("time_tolerance", "memory_tolerance", "host_tolerance", "tolerance", "tolerances")


def fraction_hint(given: str, value: float) -> str:
    """Why a tolerance >= 1 is worth a warning (``given``: how it was written): what it is read as."""
    return (
        f"{given}: tolerances are fractions (0.05 = 5%), so {value:g} is read as +{value * 100:.0f}%; "
        f"if you meant {value:g}%, write {value / 100:g}"
    )


def large_tolerances(options: Mapping[str, Any], where: str = "@pytest.mark.gpuperf") -> list[str]:
    """A :func:`fraction_hint` for every tolerance >= 1 among a marker's checked options (kept: it may be meant)."""
    found = []
    for key in TOLERANCE_KEYS:
        value = options.get(key)
        items = value.items() if isinstance(value, Mapping) else [(None, value)]
        for name, number in items:
            if isinstance(number, (int, float)) and number >= 1:
                given = f"{number:g}" if name is None else f"{{{name!r}: {number:g}}}"
                found.append(fraction_hint(f"{where}({key}={given})", float(number)))
    return found


#: Keys accepted by ``@pytest.mark.gpuperf(...)``.
GPUPERF_MARKER_ARGS = tuple(p for p in inspect.signature(gpuperf_marker).parameters if p != "where")
GPUPERF_MARKER_KEYS = frozenset(GPUPERF_MARKER_ARGS)


#: What ``pytest --markers`` says of ``gpuperf(...)`` after its signature (the keywords come from markers.py).
GPUPERF_MARKER_HELP = (
    "perf-test settings for pytest-gpuperf; tolerances are fractions (0.05 = 5%) or mappings per backend "
    "({'cuda': 0.15}), host_tolerance is a CUDA step's host overhead's, tolerances maps metric names to their own "
    "tolerance, bound asserts the expected memory/compute/latency-bound class, informational names metrics that are "
    "recorded and shown but never fail the test (optionally per backend)"
)
BACKENDS_MARKER = (
    "gpuperf_backends(*names): backends this perf test supports (cuda, mps, vulkan, cpu, or a plugin's); "
    "it runs once per selected available backend and is skipped with the reason where a backend is absent"
)


def marker_lines() -> tuple[str, ...]:
    """The ``markers`` ini lines: ``gpuperf(...)`` lists every keyword :func:`.markers.gpuperf_marker` accepts."""
    signature = ", ".join(f"{key}=None" for key in GPUPERF_MARKER_ARGS)
    return (f"gpuperf({signature}): {GPUPERF_MARKER_HELP}", BACKENDS_MARKER)


def gpuperf_backends_marker(*names: Any, where: str = "@pytest.mark.gpuperf_backends") -> tuple[str, ...]:
    """The backend names of ``@pytest.mark.gpuperf_backends("cuda", "cpu")``, lower-cased; at least one."""
    if not names:
        raise MarkerError(f"{where}() names no backend; give at least one, e.g. gpuperf_backends('cuda', 'cpu')")
    bad = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad:
        raise MarkerError(f"{where}: backend names must be non-empty strings, got {bad!r}")
    return tuple(n.strip().lower() for n in names)


def check_items(value: Any, what: str) -> float:
    """``gpuperf.measure(items=...)``: work per step, a finite number > 0 (0 would switch the throughput gate off)."""
    try:
        return float(positive_number(value, f"{what} (items per step, > 0)"))
    except NumberError as exc:
        raise MarkerError(str(exc)) from None


def _bind(function: Callable[..., Any], node_id: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    where = f"{node_id}: @pytest.mark.{name}"
    accepted = [p for p in inspect.signature(function).parameters if p != "where"]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        guesses = {name: close[0] for name in unknown if (close := get_close_matches(name, accepted, n=1))}
        named = ", ".join(guess if len(unknown) == 1 else f"{guess} for {name}" for name, guess in guesses.items())
        hint = f" (did you mean {named}?)" if guesses else ""
        raise MarkerError(f"{where} got unknown argument(s) {unknown}{hint}; known: {sorted(accepted)}")
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as exc:
        raise MarkerError(f"{where}: {exc}; accepted: {', '.join(accepted)}") from None
    return function(*args, **kwargs, where=where)


def gpuperf_options(node_id: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> MarkerOptions:
    """Validate ``@pytest.mark.gpuperf(*args, **kwargs)`` of test ``node_id``; the checked options."""
    if args:
        raise MarkerError(f"{node_id}: @pytest.mark.gpuperf takes keyword arguments only, got {args!r}")
    return MarkerOptions(_bind(gpuperf_marker, node_id, "gpuperf", (), dict(kwargs)))


def declared_backends(node_id: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """Validate ``@pytest.mark.gpuperf_backends(*args, **kwargs)`` of test ``node_id``; the names it declares."""
    return _bind(gpuperf_backends_marker, node_id, "gpuperf_backends", tuple(args), dict(kwargs))
