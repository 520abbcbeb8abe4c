"""A pytest plugin for benchmarks: where a perf test's seconds go, as perf_counter spans per test (and cProfile).

Loaded by ``benchmarks/bench_test_overhead.py`` in the pytest processes it starts (``-p overhead_probe`` with this
folder on ``PYTHONPATH``). It wraps the plugin's functions named in :data:`SPANS` (module attribute or class
method) with a timer, so each test gets the inclusive seconds of every span, and writes them as JSON to
``$OVERHEAD_PROBE_OUT`` at session end. With ``$OVERHEAD_PROBE_PROFILE`` set to a path, the first perf test's
setup and call phases run under cProfile and its statistics are written there (``pstats`` format).

The wrapped names are the plugin's own seams (the timing loop, the memory pass, counting, roofs, judging ...);
a name that does not exist (a module moved) is skipped and listed under ``missing`` in the output.
"""

from __future__ import annotations

import cProfile
import functools
import importlib
import json
import os
import time
from typing import Any

import pytest

#: (label, "module:attribute" or "module:Class.method"), in the order of a measure() call.
SPANS: list[tuple[str, str]] = [
    ("fixture: backend", "pytest_gpuperf.backends:get_backend"),
    ("fixture: handle", "pytest_gpuperf.fixture:handle_for"),
    ("plan (baseline lookup)", "pytest_gpuperf.measuring.plan:plan_measure"),
    ("baseline load", "pytest_gpuperf.baselines.sources:FileBaselines.file"),
    ("probes (warm call, memory, syncs)", "pytest_gpuperf.measuring.probes:probe"),
    ("  memory pass", "pytest_gpuperf.backends.cpu:CpuBackend.measure_peak_memory"),
    ("  memory pass", "pytest_gpuperf.backends.cuda:CudaBackend.measure_peak_memory"),
    ("  sync check", "pytest_gpuperf.timing.cuda.host_syncs:count_cuda_syncs"),
    ("measuring loop", "pytest_gpuperf.timing:measure_time"),
    ("  warm-up", "pytest_gpuperf.timing.warmup:warm_up"),
    ("  graph capture", "pytest_gpuperf.timing.cuda.graph:capture"),
    ("  CUPTI kernel sums", "pytest_gpuperf.timing.cuda.cupti:kernel_sums"),
    ("  NVML start", "pytest_gpuperf.timing.cuda.nvml:ClockWatch.for_current_device"),
    ("after-measure hooks", "pytest_gpuperf.profiling.extension:ProfilingExtension.after_measure"),
    ("  fingerprint", "pytest_gpuperf.judging.service:Judging.fingerprint"),
    ("  FLOP/byte count", "pytest_gpuperf.profiling.counting:count_step"),
    ("  roofs", "pytest_gpuperf.profiling.roofs:RoofProvider.roofs"),
    ("  roof measurement", "pytest_gpuperf.profiling.roofs:measure"),
    ("  roof refresh", "pytest_gpuperf.profiling.roofs:RoofProvider.refresh"),
    ("  torch.profiler trace", "pytest_gpuperf.profiling.torch_trace:capture_trace"),
    ("judge", "pytest_gpuperf.judging.service:Judging.judge"),
    ("confirm in process", "pytest_gpuperf.measuring.pipeline:Stages.retime"),
    ("store", "pytest_gpuperf.judging.service:Judging.store"),
    ("fresh-process confirm", "pytest_gpuperf.session:GpuperfSession._replicate"),
]

_current: list[str | None] = [None]
SPAN_SECONDS: dict[str, dict[str, float]] = {}
PHASES: dict[str, dict[str, float]] = {}
MISSING: list[str] = []
_depth: dict[str, int] = {}


def _wrap(label: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        key = f"{label}"
        nested = _depth.get(key, 0)
        _depth[key] = nested + 1
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _depth[key] = nested
            if nested == 0 and _current[0] is not None:  # a span inside itself (recursion) counts once
                spans = SPAN_SECONDS.setdefault(_current[0], {})
                spans[label] = spans.get(label, 0.0) + time.perf_counter() - started

    timed.__overhead_probe__ = True  # type: ignore[attr-defined]
    return timed


def install() -> None:
    """Wrap every span's function in place (idempotent)."""
    for label, target in SPANS:
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            MISSING.append(target)
            continue
        owner: Any = module
        *path, name = attr.split(".")
        try:
            for part in path:
                owner = getattr(owner, part)
            fn = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        except (AttributeError, KeyError):
            MISSING.append(target)
            continue
        if getattr(fn, "__overhead_probe__", False):
            continue
        if isinstance(fn, (staticmethod, classmethod)):
            setattr(owner, name, type(fn)(_wrap(label, fn.__func__)))
        else:
            setattr(owner, name, _wrap(label, fn))


_profiler: list[cProfile.Profile | None] = [None]
_profiled: list[bool] = [False]


def pytest_configure(config: pytest.Config) -> None:
    """Wrap the spans once the plugin's modules are importable."""
    install()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    """Attribute spans to ``item``; cProfile the first perf test when asked."""
    _current[0] = item.nodeid
    path = os.environ.get("OVERHEAD_PROBE_PROFILE")
    profile = bool(path) and not _profiled[0] and "gpuperf" in getattr(item, "fixturenames", ())
    if profile:
        _profiled[0] = True
        _profiler[0] = cProfile.Profile()
        _profiler[0].enable()
    try:
        yield
    finally:
        if profile and _profiler[0] is not None:
            _profiler[0].disable()
            _profiler[0].dump_stats(str(path))
        _current[0] = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep each phase's duration (setup, call, teardown) per test."""
    PHASES.setdefault(report.nodeid, {})[report.when] = report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write spans and phases as JSON to ``$OVERHEAD_PROBE_OUT``."""
    out = os.environ.get("OVERHEAD_PROBE_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"spans": SPAN_SECONDS, "phases": PHASES, "missing": MISSING}, handle)
