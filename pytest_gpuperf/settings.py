"""Command-line options, their ini twins, and the resolved :class:`Settings`.

Every ``--gpuperf-*`` flag has an ini key of the same name with underscores
(``--gpuperf-max-time`` <-> ``gpuperf_max_time``); the command line wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.measure import MeasureConfig

# (flag, kind, default, help). kind: "bool" | "str" | "float" | "int"
OPTIONS: list[tuple[str, str, Any, str]] = [
    ("--gpuperf", "bool", False, "measure perf tests and judge them against baselines (off: run each step once)"),
    ("--gpuperf-update", "bool", False, "record or refresh the baselines of the perf tests that ran; others are kept"),
    ("--gpuperf-baselines", "str", "baselines", "directory of baseline YAML files, relative to the rootdir"),
    ("--gpuperf-backend", "str", "", "backends to run on, comma-separated (default: every available one)"),
    ("--gpuperf-strict", "bool", False, "fail perf tests that have no baseline for this hardware"),
    ("--gpuperf-time-tolerance", "float", 0.05, "tolerated slowdown of time/throughput on GPUs (0.05 = 5%)"),
    ("--gpuperf-cpu-time-tolerance", "float", 0.25, "tolerated slowdown of time/throughput on the CPU backend"),
    ("--gpuperf-memory-tolerance", "float", 0.05, "tolerated growth of peak memory (0.05 = 5%)"),
    ("--gpuperf-max-time", "float", 2.0, "measuring budget per measure() call, in seconds"),
    ("--gpuperf-min-samples", "int", 30, "least samples per measure() call"),
    ("--gpuperf-precision", "float", 0.01, "with no baseline, stop when the judged quantile's 95% half-width < this"),
    ("--gpuperf-no-reference", "bool", False, "do not time the drift reference workload next to each step"),
    ("--gpuperf-no-confirm", "bool", False, "fail a suspected time regression without measuring again"),
    ("--gpuperf-l2-flush", "bool", False, "write a buffer larger than the cache before each timed call (cold cache)"),
    ("--gpuperf-cuda-graph", "str", "auto", "time short CUDA steps as graph replays: auto (< 100 us), on, off"),
    (
        "--gpuperf-cpu-clock",
        "str",
        "auto",
        "CPU backend clock: thread (CPU time), wall, auto (thread if 1 torch thread)",
    ),
]


def ini_name(flag: str) -> str:
    """``--gpuperf-max-time`` -> ``gpuperf_max_time`` (``--gpuperf`` -> ``gpuperf``)."""
    return flag.lstrip("-").replace("-", "_")


_REGISTRY: dict[str, tuple[str, Any]] = {}


def add_options(parser: pytest.Parser, options: list[tuple[str, str, Any, str]] | None = None) -> None:
    """Register command-line flags and their ini twins (the core's ``OPTIONS`` by default).

    Feature modules call this from their own ``pytest_addoption`` with their own list,
    then read values with :func:`get_option`.
    """
    group = parser.getgroup("gpuperf", "GPU performance regression testing (pytest-gpuperf)")
    for flag, kind, default, help_text in OPTIONS if options is None else options:
        _REGISTRY[flag] = (kind, default)
        name = ini_name(flag)
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, dest=name, help=help_text)
            parser.addini(name, help=help_text, type="bool", default=default)
        else:
            metavar = "DIR" if "baselines" in flag else ("NAMES" if "backend" in flag else "N")
            group.addoption(flag, action="store", default=None, dest=name, metavar=metavar, help=help_text)
            parser.addini(name, help=f"{help_text} (default {default!r})", default=str(default))


def get_option(config: pytest.Config, flag: str) -> Any:
    """The value of ``flag``: command line first, then the ini twin, converted to its kind."""
    if flag in _REGISTRY:
        kind, default = _REGISTRY[flag]
        name = ini_name(flag)
        value = config.getoption(name, default=None)
        if value is None:
            value = config.getini(name)
        if kind == "bool":
            return bool(value)
        if kind == "float":
            return _convert(float, value, flag)
        if kind == "int":
            return _convert(int, value, flag)
        return str(value) if value is not None else default
    raise KeyError(f"{flag} is not a registered pytest-gpuperf option")


def _convert(kind: type, value: Any, flag: str) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{flag} / {ini_name(flag)}: expected a {kind.__name__}, got {value!r}") from None


@dataclass
class Settings:
    """Everything the active session needs, resolved once at configure time."""

    enabled: bool
    update: bool
    baselines_dir: Path
    backends: list[str]
    strict: bool
    time_tolerance: float
    cpu_time_tolerance: float
    memory_tolerance: float
    confirm: bool
    measure: MeasureConfig

    def time_tolerance_for(self, backend: Backend) -> float:
        """Default time tolerance of a backend: host-CPU devices are noisier than a GPU."""
        return self.cpu_time_tolerance if backend.is_host_cpu() else self.time_tolerance


def selected_backends(config: pytest.Config) -> list[str]:
    """Backends named by ``--gpuperf-backend`` (validated), or [] for "every available one"."""
    from pytest_gpuperf.backends import parse_backend_list

    value = get_option(config, "--gpuperf-backend")
    if not value:
        return []
    try:
        return parse_backend_list(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--gpuperf-backend: {exc}") from None


def _choice(value: str, flag: str, choices: tuple[str, ...]) -> str:
    mode = value.strip().lower() or choices[0]
    if mode not in choices:
        raise pytest.UsageError(f"{flag} / {ini_name(flag)}: expected one of {', '.join(choices)}, got {value!r}")
    return mode


def resolve_settings(config: pytest.Config) -> Settings:
    """Read every option once; raises ``pytest.UsageError`` for bad values."""
    from pytest_gpuperf.measure import CPU_CLOCKS, GRAPH_MODES, MeasureConfig  # lazily: plain runs stay light

    baselines = Path(get_option(config, "--gpuperf-baselines"))
    if not baselines.is_absolute():
        baselines = config.rootpath / baselines
    measure = MeasureConfig(
        max_time=get_option(config, "--gpuperf-max-time"),
        min_samples=get_option(config, "--gpuperf-min-samples"),
        target_precision=get_option(config, "--gpuperf-precision"),
        use_reference=not get_option(config, "--gpuperf-no-reference"),
        l2_flush=get_option(config, "--gpuperf-l2-flush"),
        cuda_graph=_choice(get_option(config, "--gpuperf-cuda-graph"), "--gpuperf-cuda-graph", GRAPH_MODES),
        cpu_clock=_choice(get_option(config, "--gpuperf-cpu-clock"), "--gpuperf-cpu-clock", CPU_CLOCKS),
    )
    return Settings(
        enabled=get_option(config, "--gpuperf") or get_option(config, "--gpuperf-update"),
        update=get_option(config, "--gpuperf-update"),
        baselines_dir=baselines,
        backends=selected_backends(config),
        strict=get_option(config, "--gpuperf-strict"),
        time_tolerance=get_option(config, "--gpuperf-time-tolerance"),
        cpu_time_tolerance=get_option(config, "--gpuperf-cpu-time-tolerance"),
        memory_tolerance=get_option(config, "--gpuperf-memory-tolerance"),
        confirm=not get_option(config, "--gpuperf-no-confirm"),
        measure=measure,
    )
