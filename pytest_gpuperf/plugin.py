"""pytest-gpuperf's pytest plugin (entry point ``gpuperf``).

This module is imported in *every* pytest run of an environment that has the
package installed, so it imports nothing heavy: torch, numpy, yaml and wgpu are
imported inside the functions that need them, and the measuring session
(:class:`pytest_gpuperf.session.GpuperfSession`) is registered only under
``--gpuperf`` / ``--gpuperf-update``, the way pytest-cov registers its engine
only under ``--cov``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import BACKEND_KEY, SESSION_KEY
from pytest_gpuperf.settings import (
    add_options,
    check_all_options,
    check_needs_gpuperf,
    get_option,
    resolve_settings,
    selected_backends,
    warn_deprecated,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.markers import MarkerOptions


#: Feature plugins, each a light module with its own options, hooks and fixtures.
pytest_plugins = [
    # pytest-benchmark's header and .benchmarks/ only when its fixture is used
    "pytest_gpuperf.reporting.benchmark_quiet",
    "pytest_gpuperf.baselines.plugin",
    "pytest_gpuperf.distributed.plugin",
    "pytest_gpuperf.profiling.plugin",
    "pytest_gpuperf.reporting.plugin",
    "pytest_gpuperf.backends.vulkan.plugin",
    "pytest_gpuperf.workers.plugin",
    "pytest_gpuperf.history.plugin",
    "pytest_gpuperf.ab.plugin",  # last: its pytest_pyfunc_call must run before the distributed one
]
SYNC_TIMER = "pytest_gpuperf.timing.sync_timer.synchronized_perf_counter"
#: Each ``gpuperf`` marker checked at collection, by the id of its ``Mark``: (the mark, its checked options).
MARKER_OPTIONS_KEY = pytest.StashKey["dict[int, tuple[Any, MarkerOptions]]"]()

_TOLERANCE = {"section": "tolerances"}

#: The core's flags and ini keys (ini keys without a section: the measuring loop).
OPTIONS: list[tuple[Any, ...]] = [
    ("--gpuperf", "bool", False, "measure perf tests and judge them against baselines (off: run each step once)"),
    ("--gpuperf-update", "bool", False, "record or refresh the baselines of the perf tests that ran; others are kept"),
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
    (
        "gpuperf_baselines",
        "str",
        "baselines",
        "directory of baseline YAML files, relative to the rootdir",
        {"metavar": "DIR", "section": "baselines"},
    ),
    (
        "gpuperf_processes",
        "int",
        0,
        "with --gpuperf-update, record each baseline from N fresh processes and store their spread "
        "(0: 3 on the CPU backend, on a GPU that ran the test at its power cap and for a time tolerance under 5%, "
        "1 otherwise)",
        {"minimum": 0, "section": "baselines"},
    ),
    ("gpuperf_time_tolerance", "float", 0.05, "tolerated slowdown of time/throughput on GPUs (0.05 = 5%)", _TOLERANCE),
    ("gpuperf_cpu_time_tolerance", "float", 0.25, "tolerated slowdown of time/throughput on the CPU", _TOLERANCE),
    ("gpuperf_memory_tolerance", "float", 0.05, "tolerated growth of peak memory (0.05 = 5%)", _TOLERANCE),
    (
        "gpuperf_host_tolerance",
        "float",
        0.25,
        "tolerated growth of a CUDA step's host overhead (eager time minus device time; 0.25 = 25%)",
        _TOLERANCE,
    ),
    ("gpuperf_max_time", "float", 2.0, "measuring budget per measure() call, in seconds", {"above": 0}),
    ("gpuperf_min_samples", "int", 30, "least samples per measure() call", {"minimum": 1}),
    (
        "gpuperf_precision",
        "float",
        0.01,
        "with no baseline, stop when the judged quantile's 95% half-width < this",
        {"above": 0, "metavar": "FRACTION"},
    ),
    ("gpuperf_no_confirm", "bool", False, "fail a suspected time regression without measuring again"),
    (
        "gpuperf_power_warmup",
        "float",
        2.5,
        "CUDA: most seconds of replays before sampling while the GPU's SM clock or power still drifts "
        "(0: no power warm-up)",
        {"metavar": "SECONDS"},
    ),
    ("gpuperf_l2_flush", "bool", False, "write a buffer larger than the cache before each timed call (cold cache)"),
    (
        "gpuperf_cuda_graph",
        "str",
        "auto",
        "CUDA device time from a graph of the whole step: auto/on (capture; CUPTI kernel sums, then events "
        "when capture fails), off (no graph)",
        {"choices": ("auto", "on", "off")},
    ),
    (
        "gpuperf_no_cupti",
        "bool",
        False,
        "on CUDA, when a step cannot be captured into a CUDA graph, time eager calls with events instead of "
        "summing its kernels through the CUDA profiler (whose start costs seconds)",
    ),
    (
        "gpuperf_cpu_clock",
        "str",
        "auto",
        "CPU backend clock: thread (CPU time), wall, auto (thread if 1 torch thread)",
        {"choices": ("auto", "thread", "wall")},
    ),
    (
        "gpuperf_cpu_threads",
        "int",
        1,
        "intra-op torch threads while timing CPU steps (0: the test's own); recorded in the CPU fingerprint",
        {"minimum": 0},
    ),
    (
        "gpuperf_no_heap_shift",
        "bool",
        False,
        "CPU backend: keep the step's heap layout for the whole process (by default a random spacer shifts it "
        "between samples and glibc's mmap/trim thresholds are fixed, so a process is not stuck in a slow layout)",
    ),
]

def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declare the hooks feature plugins implement (:mod:`pytest_gpuperf.hookspecs`)."""
    from pytest_gpuperf import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the core's flags and ini keys (``OPTIONS``)."""
    add_options(parser, OPTIONS, "measuring loop")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register markers always; start the measuring session only under ``--gpuperf``."""
    from pytest_gpuperf.markers import marker_lines

    for marker in marker_lines():
        config.addinivalue_line("markers", marker)
    check_all_options(config)
    warn_deprecated(config)
    _refuse_options_without_gpuperf(config)
    if get_option(config, "--gpuperf-backend"):
        selected_backends(config)  # raises pytest.UsageError listing known backends
    if not (get_option(config, "--gpuperf") or get_option(config, "--gpuperf-update")):
        return
    _silence_torch_debug_noise(config)
    from pytest_gpuperf.session import GpuperfSession

    session = GpuperfSession(config, resolve_settings(config))
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "gpuperf-session")
    _use_synchronized_benchmark_timer(config)


def _refuse_options_without_gpuperf(config: pytest.Config) -> None:
    """A flag that means something only under ``--gpuperf`` (``--gpuperf-json`` ...) without it is a usage error:
    a CI line that forgot ``--gpuperf`` would gate nothing and say nothing. The recording flags turn it on."""
    found = check_needs_gpuperf(config)
    if found is None or config.option.help:
        return
    name, message = found
    if name == "--gpuperf-bisect":  # git bisect run reads exit 4 as "bad commit"; above 127 stops the bisection
        pytest.exit(f"{message}; exit 128 stops git bisect run", returncode=128)
    raise pytest.UsageError(message)


#: Warnings torch emits for the plugin's own timing machinery, not for the user's code.
QUIET_WARNINGS = ("ignore:Synchronization debug mode is a prototype feature",)


def _silence_torch_debug_noise(config: pytest.Config) -> None:
    """Under ``--gpuperf``: no ``USDT: ... profiler_start`` lines from torch.profiler's kineto, no
    ``Synchronization debug mode is a prototype feature`` warnings from the CUDA-graph timer.

    kineto prints ``USDT`` lines at a level above its errors, so only ``KINETO_LOG_LEVEL=6``
    drops them (kineto reads it when the profiler first starts); a value the user set is kept.
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    for line in QUIET_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


def _use_synchronized_benchmark_timer(config: pytest.Config) -> None:
    """Give pytest-benchmark's ``benchmark`` fixture a device-synchronizing timer under ``--gpuperf``.

    Only when the user kept pytest-benchmark's default timer; runs before
    pytest-benchmark's own ``pytest_configure`` (tryfirst) which loads it.
    """
    current = getattr(config.option, "benchmark_timer", None)
    if current is not None and "perf_counter" in str(current) and "pytest_gpuperf" not in str(current):
        config.option.benchmark_timer = SYNC_TIMER


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that uses ``gpuperf`` over its selected, available backends.

    Runs after ``@pytest.mark.parametrize`` (trylast), so the backend is the last part of the id
    (``test_x[64-cpu]``), and with module scope, so module-scoped fixtures may use the backend.
    Also validates the test's ``gpuperf`` / ``gpuperf_backends`` markers: a bad one is a collection error.
    """
    if "gpuperf_backend" not in metafunc.fixturenames:
        return
    from pytest_gpuperf.backends.selection import plan_backends
    from pytest_gpuperf.markers import MarkerError, declared_backends, gpuperf_options, marker_location

    node_id = metafunc.definition.nodeid
    declared = None
    problem = None
    name = "gpuperf"
    checked = metafunc.config.stash.setdefault(MARKER_OPTIONS_KEY, {})
    try:
        for mark in metafunc.definition.iter_markers("gpuperf"):
            checked[id(mark)] = (mark, gpuperf_options(node_id, mark.args, mark.kwargs))
        name = "gpuperf_backends"
        marker = metafunc.definition.get_closest_marker("gpuperf_backends")
        if marker is not None:
            declared = declared_backends(node_id, marker.args, marker.kwargs)
    except MarkerError as exc:
        problem = str(exc)
    if problem:
        where = marker_location(metafunc.function, name, metafunc.definition.location[:2])
        pytest.fail(f"{where}: {problem}", pytrace=False)  # a collection error of this module, message only
    _warn_large_tolerances(metafunc)
    if declared is not None:
        from pytest_gpuperf.backends import known_backend_names

        unknown = [n for n in declared if n not in known_backend_names()]
        if unknown:
            pytest.fail(
                f"{node_id}: @pytest.mark.gpuperf_backends names unknown backend(s) "
                f"{unknown}; known backends: {', '.join(known_backend_names())}",
                pytrace=False,
            )
    params = [
        pytest.param(p.name, id=p.name, marks=[pytest.mark.skip(reason=p.skip_reason)] if p.skip_reason else [])
        for p in plan_backends(declared, selected_backends(metafunc.config))
    ]
    metafunc.parametrize("gpuperf_backend", params, indirect=True, scope="module")


def _warn_large_tolerances(metafunc: pytest.Metafunc) -> None:
    """Under ``--gpuperf``: a GpuperfWarning at the test for each marker tolerance >= 1 (``time_tolerance=10`` is
    +1000%, likely meant as 10%); it is kept, as a deliberately loose gate may need it."""
    if metafunc.config.stash.get(SESSION_KEY, None) is None:
        return
    from pytest_gpuperf.markers import large_tolerances
    from pytest_gpuperf.results import GpuperfWarning

    checked = metafunc.config.stash.get(MARKER_OPTIONS_KEY, {})
    for mark in metafunc.definition.iter_markers("gpuperf"):
        for line in large_tolerances(checked[id(mark)][1]):
            metafunc.definition.warn(GpuperfWarning(f"{metafunc.definition.nodeid}: {line}"))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``--gpuperf-strict``, a backend named by ``--gpuperf-backend`` that this machine lacks is a usage error.

    Otherwise a GPU gate that lands on a runner without the GPU skips every test and passes.
    (After every plugin's ``pytest_configure``, so a device selection such as ``gpuperf_vulkan_device`` counts.)
    """
    config = session.config
    if not (get_option(config, "--gpuperf-strict") and get_option(config, "--gpuperf-backend")):
        return
    from pytest_gpuperf.backends.selection import availability

    for name in selected_backends(config):
        found = availability(name)
        if not found.available:
            raise pytest.UsageError(
                f"--gpuperf-backend {name} with --gpuperf-strict: the {name} backend is not available on this "
                f"machine ({found.reason}); run on a machine that has it, or drop --gpuperf-strict to skip instead"
            )


@pytest.fixture(scope="module")
def gpuperf_backend(request: pytest.FixtureRequest) -> Backend:
    """The backend (cuda, mps, vulkan, cpu ...) this instance of a perf test runs on (module scope).

    Tests are parametrized over the selected available backends, so the test id ends with
    the backend name (``test_matmul[cuda]``, ``test_matmul[64-cuda]``). Module-scoped fixtures
    may request it (or :func:`gpuperf_device`) to build a model once per module and backend.
    """
    from pytest_gpuperf.backends import get_backend

    name = getattr(request, "param", None)
    if name is None:
        raise pytest.UsageError(
            "gpuperf_backend is parametrized by pytest-gpuperf for tests that use gpuperf, gpuperf_backend or "
            "gpuperf_device; request it from such a test or from a fixture of module scope or narrower"
        )
    return get_backend(name)


@pytest.fixture(scope="module")
def gpuperf_device(gpuperf_backend: Backend) -> Any:
    """The torch device of this test instance's backend (module scope), e.g. to build a model once per module.

    ``@pytest.fixture(scope="module") def model(gpuperf_device): return Net().to(gpuperf_device)``
    """
    return gpuperf_backend.device()


@pytest.fixture
def gpuperf(request: pytest.FixtureRequest, gpuperf_backend: Backend) -> Iterator[GpuPerf]:
    """Measure perf steps and judge them against the baselines of this hardware.

    ``gpuperf.device`` is the torch device to compute on; ``gpuperf.measure(step,
    items=..., unit="tokens")`` times a zero-argument callable with device-correct
    timing, records its peak device memory and throughput, and fails the test on a
    regression; ``gpuperf.record(name, value, unit, better)`` records any other metric;
    ``gpuperf.pick(cpu=..., cuda=...)`` sizes work per device. Without ``--gpuperf``
    each step runs once as a smoke test.
    """
    from pytest_gpuperf.fixture import handle_for

    options = _marker_options(request)
    request.node.stash[BACKEND_KEY] = gpuperf_backend
    handle = handle_for(request.node, gpuperf_backend, options)
    yield handle
    gpuperf_backend.reset_state()


def _marker_options(request: pytest.FixtureRequest) -> MarkerOptions:
    """The checked options of the test's closest ``gpuperf`` marker: those collection checked, else checked now
    (a marker collection did not see, e.g. one a ``pytest.param`` carries); a bad one fails the test."""
    from pytest_gpuperf.markers import MarkerError, MarkerOptions, gpuperf_options, marker_location

    marker = request.node.get_closest_marker("gpuperf")
    if marker is None:
        return MarkerOptions()
    seen = request.config.stash.get(MARKER_OPTIONS_KEY, {}).get(id(marker))
    if seen is not None and seen[0] is marker:
        return seen[1]
    try:
        return gpuperf_options(request.node.nodeid, marker.args, marker.kwargs)
    except MarkerError as exc:
        where = marker_location(getattr(request, "function", None), "gpuperf", request.node.location[:2])
        problem = f"{where}: {exc}"
    pytest.fail(problem, pytrace=False)
