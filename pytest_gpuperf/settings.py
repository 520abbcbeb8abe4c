"""Options: a few command-line flags, every other setting an ini key; and the resolved :class:`Settings`.

An options table names each option by how it is given:

* ``--gpuperf-json``: a command-line flag, with an ini twin of the same name with underscores
  (``gpuperf_json``); the command line wins. Only what users choose per run is a flag.
* ``gpuperf_max_time``: an ini key only, set in pytest.ini / pyproject.toml or with
  ``-o gpuperf_max_time=0.5``. Its old flag (``--gpuperf-max-time``) still parses, hidden from
  ``--help``, with a deprecation warning naming the key (to be removed in the next release).

``docs/options.md`` lists every option with its default; ``tests/test_options_doc.py`` keeps it in step.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.timing import MeasureConfig

# (name, kind, default, help[, extras]). name: "--gpuperf-x" (a flag and its ini twin) or "gpuperf_x" (an ini key
# only). kind: "bool" | "str" | "float" | "int". extras: metavar, choices (accepted values), aliases (old flag
# spellings: working, hidden from --help), minimum / above (inclusive / exclusive lower bound of a number),
# maximum (inclusive upper bound), section (its group in docs/options.md, one of SECTIONS).
OptionSpec = tuple[Any, ...]

#: The groups of ini keys in docs/options.md, in order.
SECTIONS = (
    "measuring loop",
    "tolerances",
    "timeouts",
    "baselines",
    "reports",
    "profiling",
    "distributed",
    "A/B",
    "backends",
)


def ini_name(flag: str) -> str:
    """``--gpuperf-max-time`` -> ``gpuperf_max_time`` (``--gpuperf`` -> ``gpuperf``; an ini key stays itself)."""
    return flag.lstrip("-").replace("-", "_")


def flag_name(name: str) -> str:
    """``gpuperf_max_time`` -> ``--gpuperf-max-time``."""
    return "--" + ini_name(name).replace("_", "-")


@dataclass(frozen=True)
class Option:
    """One registered option: its ini key, its visible flag (None: an ini key only) and how its value is checked."""

    name: str
    flag: str | None
    kind: str
    default: Any
    help: str
    section: str
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def hidden_flags(self) -> tuple[str, ...]:
        """Spellings that parse but are not listed: old aliases, and an ini-only key's retired flag."""
        retired = () if self.flag else (flag_name(self.name),)
        return (*retired, *self.extras.get("aliases", ()))


_REGISTRY: dict[str, Option] = {}
#: The title of the plugin's flags in ``pytest --help``; says where every other setting is.
GROUP_TITLE = (
    "GPU performance regression testing (pytest-gpuperf; every other setting is an ini key gpuperf_*, "
    "listed under [pytest] ini-options below and in docs/options.md)"
)


def registered_options() -> list[Option]:
    """Every option registered so far (by the core and by the feature plugins), in registration order."""
    return list(_REGISTRY.values())


def _default_metavar(name: str, kind: str) -> str:
    if kind == "int":
        return "N"
    if kind == "float":
        if "tolerance" in name or "share" in name:
            return "FRACTION"
        return "SECONDS" if "time" in name else "NUMBER"
    return "VALUE"


def metavar(option: Option) -> str:
    """How ``--help`` and docs/options.md show the value an option takes."""
    choices = option.extras.get("choices")
    if choices:
        return "{" + ",".join(choices) + "}"
    return option.extras.get("metavar") or _default_metavar(option.name, option.kind)


def argparse_help(text: str) -> str:
    """``text`` safe for argparse, which %-formats every help string (a bare ``%`` crashes ``pytest --help``)."""
    return text.replace("%", "%%")


def with_default(text: str, default: Any) -> str:
    """``text (default: 2.0)``, as pytest's own ``--help`` shows defaults; unchanged when it names its default."""
    if default in (None, "") or "(default" in text:
        return text
    return f"{text} (default: {default})"


def add_options(parser: pytest.Parser, options: list[OptionSpec], section: str) -> None:
    """Register the flags and ini keys of ``options``; ``section``: the docs group of those that name none.

    The core plugin and each feature plugin call this from their ``pytest_addoption`` with their own
    table, then read values with :func:`get_option`.
    """
    group = parser.getgroup("gpuperf", GROUP_TITLE)
    for spec in options:
        given, kind, default, help_text = spec[:4]
        extras: dict[str, Any] = dict(spec[4]) if len(spec) > 4 else {}
        visible = given if given.startswith("--") else None
        option = Option(ini_name(given), visible, kind, default, help_text, extras.pop("section", section), extras)
        _REGISTRY[option.name] = option
        shown = help_text if kind == "bool" else with_default(help_text, default)
        flags = [(visible, argparse_help(shown))] if visible else []
        flags += [(hidden, argparse.SUPPRESS) for hidden in option.hidden_flags]
        for flag, flag_help in flags:
            if kind == "bool":
                group.addoption(flag, action="store_true", default=None, dest=option.name, help=flag_help)
            else:
                group.addoption(
                    flag, action="store", default=None, dest=option.name, metavar=metavar(option), help=flag_help
                )
        if kind == "bool":
            parser.addini(option.name, help=help_text, type="bool", default=default)
            for alias in extras.get("aliases", ()):
                parser.addini(ini_name(alias), help=f"old spelling of {option.name}", type="bool", default=False)
        else:
            parser.addini(option.name, help=shown, default=str(default))


def _label(option: Option, from_command_line: bool) -> str:
    """How an error names the option: ``--gpuperf-x / gpuperf_x`` for a flag given, else the ini key."""
    flag = option.flag or (flag_name(option.name) if from_command_line else None)
    return f"{flag} / {option.name}" if flag else option.name


def get_option(config: pytest.Config, name: str) -> Any:
    """The value of option ``name`` (``gpuperf_max_time`` or ``--gpuperf-max-time``): command line first, then
    the ini key, converted to its kind and checked.

    Raises ``pytest.UsageError`` naming the option and the accepted values for a bad value.
    """
    option = _REGISTRY.get(ini_name(name))
    if option is None:
        raise KeyError(f"{name} is not a registered pytest-gpuperf option")
    value = config.getoption(option.name, default=None)
    if option.kind == "bool":
        if value:
            return True
        aliases = option.extras.get("aliases", ())
        return bool(config.getini(option.name)) or any(bool(config.getini(ini_name(a))) for a in aliases)
    label = _label(option, value is not None)
    if value is None:
        value = config.getini(option.name)
    if option.kind == "float":
        return _check_range(_convert(float, value, label), label, option.extras)
    if option.kind == "int":
        return _check_range(_convert(int, value, label), label, option.extras)
    text = str(value) if value is not None else option.default
    choices = option.extras.get("choices")
    if choices:
        return _choice(text, label, tuple(choices))
    return text


def command_line_value(config: pytest.Config, name: str) -> str | None:
    """The value this run's command line gave option ``name`` (its flag, or ``-o name=value``), as text; or None."""
    value = config.getoption(ini_name(name), default=None)
    if value is not None and value is not False:
        return "true" if value is True else str(value)
    given = None
    for item in getattr(config.option, "override_ini", None) or ():
        key, _, text = str(item).partition("=")
        if key.strip() == ini_name(name):
            given = text  # the last -o wins, as in pytest
    return given


#: What each option that means something only under ``--gpuperf`` does (``--gpuperf-ab``'s check is in ab/plugin.py).
NEEDS_GPUPERF = {
    "--gpuperf-strict": "fails perf tests that have no baseline or an inconclusive verdict",
    "--gpuperf-json": "writes the perf verdicts",
    "--gpuperf-markdown": "writes the perf verdicts",
    "--gpuperf-baseline-ref": "judges perf tests against a git ref's baselines",
    "--gpuperf-profile": "profiles measured steps",
    "--gpuperf-ncu": "profiles measured steps under Nsight Compute",
    "--gpuperf-bisect": "turns perf verdicts into git bisect's exit status",
    "gpuperf_plot": "plots measured steps",
}


def needs_gpuperf_message(usage: str, what: str) -> str:
    """The usage error of an option given without ``--gpuperf``: it names the option and the fix."""
    return (
        f"{usage} {what}, and without --gpuperf nothing is measured (each step runs once): add --gpuperf "
        f"(pytest --gpuperf {usage})"
    )


def check_needs_gpuperf(config: pytest.Config) -> tuple[str, str] | None:
    """(the option, its usage error) for an option this run's command line gave (a flag or ``-o key=...``) that
    means something only under ``--gpuperf`` while it is off; None when there is none. The ini file (its keys and
    ``addopts``) never errs: a project may set ``gpuperf_plot`` for every run, measured or not."""
    if get_option(config, "--gpuperf") or get_option(config, "--gpuperf-update") or hasattr(config, "workerinput"):
        return None
    addopts = [str(a) for a in (config.getini("addopts") or [])]
    for name, what in NEEDS_GPUPERF.items():
        option = _REGISTRY.get(ini_name(name))
        value = command_line_value(config, name)
        if option is None or not value or (option.kind == "bool" and value.lower() not in ("1", "true", "yes", "on")):
            continue
        flag = option.flag or option.name
        if any(a == flag or a.startswith(f"{flag}=") or f"{option.name}=" in a for a in addopts):
            continue  # from the ini file's addopts
        if config.getoption(option.name, default=None) is None:
            usage = f"-o {option.name}={value}"
        else:
            usage = flag if option.kind == "bool" else f"{flag} {value}"
        return name, needs_gpuperf_message(usage, what)
    return None


def _registered_here(config: pytest.Config) -> list[Option]:
    """Options registered in this run (a feature plugin disabled with ``-p no:...`` registered none)."""
    registered = getattr(getattr(config, "_parser", None), "_inidict", None)
    return [o for o in _REGISTRY.values() if registered is None or o.name in registered]


def warn_deprecated(config: pytest.Config) -> None:
    """A :class:`pytest.PytestDeprecationWarning` for each retired flag the command line gave, naming its ini key."""
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker has its controller's command line: the controller warned
    args = [str(a).split("=", 1)[0] for a in config.invocation_params.args]
    for option in _registered_here(config):
        value = config.getoption(option.name, default=None)
        if option.flag is not None or value is None:
            continue
        used = next((f for f in option.hidden_flags if f in args), option.hidden_flags[0])
        shown = "true" if value is True else value
        message = (
            f"{used} is deprecated and will be removed in the next release; set the ini key {option.name} instead "
            f"(in pytest.ini or pyproject.toml, or -o {option.name}={shown}); see docs/options.md"
        )
        config.issue_config_time_warning(pytest.PytestDeprecationWarning(message), stacklevel=2)


def check_all_options(config: pytest.Config) -> None:
    """Read every registered option once, so a bad value is a usage error at start-up, not mid-run."""
    for option in _registered_here(config):
        get_option(config, option.name)


def _convert(kind: type, value: Any, label: str) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{label}: expected a {kind.__name__}, got {value!r}") from None


def accepted_range(extras: dict[str, Any]) -> str:
    """``>= 0``, ``> 0``, ``0 <= x <= 1`` ... as printed in error messages."""
    maximum = extras.get("maximum")
    if "above" in extras:
        low = f"> {extras['above']:g}"
    else:
        low = f">= {extras.get('minimum', 0):g}"
    return low if maximum is None else f"{low} and <= {maximum:g}"


def _check_range(number: float, label: str, extras: dict[str, Any]) -> Any:
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
        raise pytest.UsageError(f"{label}: expected a number {accepted_range(extras)}, got {number!r}")
    return number


def _choice(value: str, label: str, choices: tuple[str, ...]) -> str:
    mode = value.strip().lower() or choices[0]
    if mode not in choices:
        raise pytest.UsageError(f"{label}: expected one of {', '.join(choices)}, got {value!r}")
    return mode


@dataclass
class Settings:
    """Everything the active session needs, resolved once at configure time."""

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


def resolve_settings(config: pytest.Config) -> Settings:
    """Read every option once; raises ``pytest.UsageError`` for bad values."""
    from pytest_gpuperf.timing import CPU_CLOCKS, GRAPH_MODES, MeasureConfig  # lazily: plain runs stay light

    baselines = Path(get_option(config, "gpuperf_baselines"))
    if not baselines.is_absolute():
        baselines = config.rootpath / baselines
    measure = MeasureConfig(
        max_time=get_option(config, "gpuperf_max_time"),
        min_samples=get_option(config, "gpuperf_min_samples"),
        target_precision=get_option(config, "gpuperf_precision"),
        l2_flush=get_option(config, "gpuperf_l2_flush"),
        cuda_graph=_choice(get_option(config, "gpuperf_cuda_graph"), "gpuperf_cuda_graph", GRAPH_MODES),
        cpu_clock=_choice(get_option(config, "gpuperf_cpu_clock"), "gpuperf_cpu_clock", CPU_CLOCKS),
        cpu_threads=get_option(config, "gpuperf_cpu_threads"),
        cupti=not get_option(config, "gpuperf_no_cupti"),
        power_warmup=get_option(config, "gpuperf_power_warmup"),
        shift_layout=not get_option(config, "gpuperf_no_heap_shift"),
    )
    from pytest_gpuperf.backends.cpu_threads import configure

    configure(measure.cpu_threads)  # the CPU fingerprint records it
    return Settings(
        update=get_option(config, "--gpuperf-update"),
        baselines_dir=baselines,
        backends=selected_backends(config),
        strict=get_option(config, "--gpuperf-strict"),
        time_tolerance=get_option(config, "gpuperf_time_tolerance"),
        cpu_time_tolerance=get_option(config, "gpuperf_cpu_time_tolerance"),
        memory_tolerance=get_option(config, "gpuperf_memory_tolerance"),
        confirm=not get_option(config, "gpuperf_no_confirm"),
        measure=measure,
        processes=get_option(config, "gpuperf_processes"),
        host_tolerance=get_option(config, "gpuperf_host_tolerance"),
    )
