"""Command-line options, their ini twins, and the resolved :class:`Settings`.

Every ``--gpuperf-*`` flag has an ini key of the same name with underscores
(``--gpuperf-max-time`` <-> ``gpuperf_max_time``); the command line wins.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.timing import MeasureConfig

# (flag, kind, default, help[, extras]). kind: "bool" | "str" | "float" | "int".
# extras: metavar, choices (accepted values), aliases (old spellings: working, hidden from --help),
# minimum / above (inclusive / exclusive lower bound of a number), maximum (inclusive upper bound).
OptionSpec = tuple[Any, ...]

OPTIONS: list[OptionSpec] = [
    ("--gpuperf", "bool", False, "measure perf tests and judge them against baselines (off: run each step once)"),
    ("--gpuperf-update", "bool", False, "record or refresh the baselines of the perf tests that ran; others are kept"),
    (
        "--gpuperf-baselines",
        "str",
        "baselines",
        "directory of baseline YAML files, relative to the rootdir",
        {"metavar": "DIR"},
    ),
    (
        "--gpuperf-backend",
        "str",
        "",
        "backends to run on, comma-separated, e.g. cuda,cpu (default: every available one)",
        {"metavar": "NAMES"},
    ),
    (
        "--gpuperf-strict",
        "bool",
        False,
        "fail perf tests that have no baseline for this hardware or whose verdict is inconclusive (by default "
        "those pass with a warning); a backend named by --gpuperf-backend that is absent is a usage error",
    ),
    ("--gpuperf-time-tolerance", "float", 0.05, "tolerated slowdown of time/throughput on GPUs (0.05 = 5%)"),
    ("--gpuperf-cpu-time-tolerance", "float", 0.25, "tolerated slowdown of time/throughput on the CPU backend"),
    ("--gpuperf-memory-tolerance", "float", 0.05, "tolerated growth of peak memory (0.05 = 5%)"),
    (
        "--gpuperf-host-tolerance",
        "float",
        0.25,
        "tolerated growth of a CUDA step's host overhead (eager time minus device time; 0.25 = 25%)",
    ),
    (
        "--gpuperf-power-warmup",
        "float",
        2.5,
        "CUDA: most seconds of replays before sampling while the GPU's SM clock or power still drifts "
        "(0: no power warm-up)",
        {"metavar": "SECONDS"},
    ),
    ("--gpuperf-max-time", "float", 2.0, "measuring budget per measure() call, in seconds", {"above": 0}),
    ("--gpuperf-min-samples", "int", 30, "least samples per measure() call", {"minimum": 1}),
    (
        "--gpuperf-precision",
        "float",
        0.01,
        "with no baseline, stop when the judged quantile's 95% half-width < this",
        {"above": 0, "metavar": "FRACTION"},
    ),
    ("--gpuperf-no-reference", "bool", False, "deprecated, no effect (the drift reference was removed)"),
    ("--gpuperf-no-confirm", "bool", False, "fail a suspected time regression without measuring again"),
    (
        "--gpuperf-processes",
        "int",
        0,
        "with --gpuperf-update, record each baseline from N fresh processes and store their spread "
        "(0: 3 on the CPU backend and on a GPU that ran the test at its power cap, 1 otherwise)",
        {"minimum": 0},
    ),
    ("--gpuperf-l2-flush", "bool", False, "write a buffer larger than the cache before each timed call (cold cache)"),
    (
        "--gpuperf-cuda-graph",
        "str",
        "auto",
        "CUDA device time from a graph of the whole step: auto/on (capture; CUPTI kernel sums, then events "
        "when capture fails), off (no graph)",
        {"choices": ("auto", "on", "off")},
    ),
    (
        "--gpuperf-cpu-clock",
        "str",
        "auto",
        "CPU backend clock: thread (CPU time), wall, auto (thread if 1 torch thread)",
        {"choices": ("auto", "thread", "wall")},
    ),
    (
        "--gpuperf-no-cupti",
        "bool",
        False,
        "on CUDA, when a step cannot be captured into a CUDA graph, time eager calls with events instead of "
        "summing its kernels through the CUDA profiler (whose start costs seconds)",
    ),
    (
        "--gpuperf-no-heap-shift",
        "bool",
        False,
        "CPU backend: keep the step's heap layout for the whole process (by default a random spacer shifts it "
        "between samples and glibc's mmap/trim thresholds are fixed, so a process is not stuck in a slow layout)",
    ),
    (
        "--gpuperf-cpu-threads",
        "int",
        1,
        "intra-op torch threads while timing CPU steps (0: the test's own); recorded in the CPU fingerprint",
        {"minimum": 0},
    ),
]


def ini_name(flag: str) -> str:
    """``--gpuperf-max-time`` -> ``gpuperf_max_time`` (``--gpuperf`` -> ``gpuperf``)."""
    return flag.lstrip("-").replace("-", "_")


_REGISTRY: dict[str, tuple[str, Any, dict[str, Any]]] = {}


def _default_metavar(flag: str, kind: str) -> str:
    if kind == "int":
        return "N"
    if kind == "float":
        if "tolerance" in flag or "share" in flag:
            return "FRACTION"
        return "SECONDS" if "time" in flag else "NUMBER"
    return "VALUE"


def argparse_help(text: str) -> str:
    """``text`` safe for argparse, which %-formats every help string (a bare ``%`` crashes ``pytest --help``)."""
    return text.replace("%", "%%")


def with_default(text: str, default: Any) -> str:
    """``text (default: 2.0)``, as pytest's own ``--help`` shows defaults; unchanged when it names its default."""
    if default in (None, "") or "(default" in text:
        return text
    return f"{text} (default: {default})"


def add_options(parser: pytest.Parser, options: list[OptionSpec] | None = None) -> None:
    """Register command-line flags and their ini twins (the core's ``OPTIONS`` by default).

    Feature modules call this from their own ``pytest_addoption`` with their own list,
    then read values with :func:`get_option`.
    """
    group = parser.getgroup("gpuperf", "GPU performance regression testing (pytest-gpuperf)")
    for spec in OPTIONS if options is None else options:
        flag, kind, default, help_text = spec[:4]
        extras: dict[str, Any] = dict(spec[4]) if len(spec) > 4 else {}
        _REGISTRY[flag] = (kind, default, extras)
        name = ini_name(flag)
        aliases = tuple(extras.get("aliases", ()))
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, dest=name, help=argparse_help(help_text))
            for alias in aliases:  # old spelling: still works, not listed
                group.addoption(alias, action="store_true", default=None, dest=name, help=argparse.SUPPRESS)
            parser.addini(name, help=help_text, type="bool", default=default)
            for alias in aliases:
                parser.addini(ini_name(alias), help=f"old spelling of {name}", type="bool", default=False)
            continue
        choices = extras.get("choices")
        metavar = extras.get("metavar") or ("{" + ",".join(choices) + "}" if choices else _default_metavar(flag, kind))
        shown = with_default(help_text, default)
        group.addoption(
            flag, *aliases, action="store", default=None, dest=name, metavar=metavar, help=argparse_help(shown)
        )
        parser.addini(name, help=shown, default=str(default))


def get_option(config: pytest.Config, flag: str) -> Any:
    """The value of ``flag``: command line first, then the ini twin, converted to its kind and checked.

    Raises ``pytest.UsageError`` naming the flag, its ini key and the accepted values for a bad value.
    """
    if flag not in _REGISTRY:
        raise KeyError(f"{flag} is not a registered pytest-gpuperf option")
    kind, default, extras = _REGISTRY[flag]
    name = ini_name(flag)
    value = config.getoption(name, default=None)
    if kind == "bool":
        if value:
            return True
        return bool(config.getini(name)) or any(bool(config.getini(ini_name(a))) for a in extras.get("aliases", ()))
    if value is None:
        value = config.getini(name)
    if kind == "float":
        return _check_range(_convert(float, value, flag), flag, extras)
    if kind == "int":
        return _check_range(_convert(int, value, flag), flag, extras)
    text = str(value) if value is not None else default
    choices = extras.get("choices")
    if choices:
        return _choice(text, flag, tuple(choices))
    return text


#: Options that still parse but do nothing, and what the warning says when one is given.
DEPRECATED: dict[str, str] = {
    "--gpuperf-no-reference": "--gpuperf-no-reference has no effect (the drift reference workload was removed) "
    "and will be removed in the next release; drop it from the command line or ini file",
}


def warn_deprecated(config: pytest.Config) -> None:
    """A :class:`pytest.PytestDeprecationWarning` for each deprecated option the run was given."""
    registered = getattr(getattr(config, "_parser", None), "_inidict", None)
    for flag, message in DEPRECATED.items():
        if (registered is None or ini_name(flag) in registered) and get_option(config, flag):
            config.issue_config_time_warning(pytest.PytestDeprecationWarning(message), stacklevel=2)


def check_all_options(config: pytest.Config) -> None:
    """Read every registered option once, so a bad value is a usage error at start-up, not mid-run."""
    # only options registered in this run (a feature plugin disabled with -p no:... registered none)
    registered = getattr(getattr(config, "_parser", None), "_inidict", None)
    for flag in list(_REGISTRY):
        if registered is None or ini_name(flag) in registered:
            get_option(config, flag)


def _convert(kind: type, value: Any, flag: str) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{flag} / {ini_name(flag)}: expected a {kind.__name__}, got {value!r}") from None


def accepted_range(extras: dict[str, Any]) -> str:
    """``>= 0``, ``> 0``, ``0 <= x <= 1`` ... as printed in error messages."""
    maximum = extras.get("maximum")
    if "above" in extras:
        low = f"> {extras['above']:g}"
    else:
        low = f">= {extras.get('minimum', 0):g}"
    return low if maximum is None else f"{low} and <= {maximum:g}"


def _check_range(number: float, flag: str, extras: dict[str, Any]) -> Any:
    """Every numeric option is finite and at least 0 unless its extras say otherwise."""
    low = extras.get("minimum", 0)
    above = extras.get("above")
    maximum = extras.get("maximum")
    bad = (
        not math.isfinite(number)
        or (above is not None and number <= above)
        or (above is None and number < low)
        or (maximum is not None and number > maximum)
    )
    if bad:
        raise pytest.UsageError(
            f"{flag} / {ini_name(flag)}: expected a number {accepted_range(extras)}, got {number!r}"
        )
    return number


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
    #: Processes a baseline is recorded from under ``--gpuperf-update`` (0: the backend's default).
    processes: int = 0
    #: Tolerated growth of a CUDA step's host overhead (``<step>.host_overhead``).
    host_tolerance: float = 0.25

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
    from pytest_gpuperf.timing import CPU_CLOCKS, GRAPH_MODES, MeasureConfig  # lazily: plain runs stay light

    baselines = Path(get_option(config, "--gpuperf-baselines"))
    if not baselines.is_absolute():
        baselines = config.rootpath / baselines
    measure = MeasureConfig(
        max_time=get_option(config, "--gpuperf-max-time"),
        min_samples=get_option(config, "--gpuperf-min-samples"),
        target_precision=get_option(config, "--gpuperf-precision"),
        l2_flush=get_option(config, "--gpuperf-l2-flush"),
        cuda_graph=_choice(get_option(config, "--gpuperf-cuda-graph"), "--gpuperf-cuda-graph", GRAPH_MODES),
        cpu_clock=_choice(get_option(config, "--gpuperf-cpu-clock"), "--gpuperf-cpu-clock", CPU_CLOCKS),
        cpu_threads=get_option(config, "--gpuperf-cpu-threads"),
        cupti=not get_option(config, "--gpuperf-no-cupti"),
        power_warmup=get_option(config, "--gpuperf-power-warmup"),
        shift_layout=not get_option(config, "--gpuperf-no-heap-shift"),
    )
    from pytest_gpuperf.backends.cpu_threads import configure

    configure(measure.cpu_threads)  # the CPU fingerprint records it
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
        processes=get_option(config, "--gpuperf-processes"),
        host_tolerance=get_option(config, "--gpuperf-host-tolerance"),
    )
