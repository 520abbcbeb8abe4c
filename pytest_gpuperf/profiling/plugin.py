"""pytest hooks and fixtures of the profiling feature; imported at start-up, so nothing heavy at module level.

* every measured step, on every backend, gets a memory-/compute-/latency-/host-bound verdict
  (``<name>.bound``) from its FLOPs and bytes against the device's measured roofs (kept in
  pytest's cache);
* ``--gpuperf-profile`` (or ``@pytest.mark.gpuperf_profile`` or the ``gpuperf_profile``
  fixture) writes a torch.profiler Chrome trace per step and lists its top kernels;
* ``--gpuperf-ncu`` (or ``@pytest.mark.gpuperf_ncu``) re-runs the session's ncu tests in one
  child pytest under Nsight Compute and adds ncu's verdict (``<name>.ncu_bound``); a test is
  skipped when ncu cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import ROOFS_ENV, SESSION_KEY
from pytest_gpuperf.profiling.records import (
    ARTIFACT_PROPERTY,
    NCU_PAYLOAD,
    PROFILE_KEY,
    PROFILE_REQUESTED_KEY,
    USER_PROPERTY,
    StepProfile,
)
from pytest_gpuperf.settings import add_options, get_option

if TYPE_CHECKING:
    from pytest_gpuperf.hookspecs import FailureReason, ReportSection, SummarySection
    from pytest_gpuperf.profiling.extension import ProfilingExtension
    from pytest_gpuperf.reporting.records import TestRecord

OPTIONS: list[tuple[Any, ...]] = [
    ("--gpuperf-profile", "bool", False, "write a torch.profiler Chrome trace of each measured step (with --gpuperf)"),
    ("--gpuperf-ncu", "bool", False, "re-run each measured step under Nsight Compute for its Speed-of-Light verdict"),
    (
        "gpuperf_artifacts",
        "str",
        "gpuperf-artifacts",
        "directory for traces and ncu CSVs, relative to the rootdir",
        {"metavar": "DIR"},
    ),
    (
        "gpuperf_latency_share",
        "str",
        "auto",
        "a step below this share of its roof is latency-bound: 0..1, or auto (0.66 on GPUs, calibrated against "
        "ncu; 0.3 on host CPUs)",
        {"metavar": "SHARE"},
    ),
    ("gpuperf_recalibrate", "bool", False, "measure the device's peak FLOP/s and bandwidth again (ignore the cache)"),
    (
        "gpuperf_ncu_timeout",
        "float",
        120.0,
        "seconds the session's ncu capture may take in all (one child captures every ncu test); past it the "
        "session's ncu tests are skipped with ncu's last words and the child is stopped",
        {"above": 0, "section": "timeouts"},
    ),
    (
        "gpuperf_ncu_top_ops",
        "int",
        8,
        "ncu profiles the kernels of at most this many of a step's operations, the longest by device time "
        "(fewer once they cover 90% of it); 0: every kernel of the step",
        {"minimum": 0},
    ),
    (
        "gpuperf_ncu_max_kernels",
        "int",
        32,
        "ncu replays at most this many kernels per step (one window), counted per operation in the child's ranking "
        "call: the longest operations whose kernels fit; 0: no kernel cap",
        {"minimum": 0},
    ),
    (
        "gpuperf_ncu_full_report",
        "bool",
        False,
        "also keep ncu's --set full report of the captured steps (.ncu-rep, opens in the Nsight Compute GUI) under "
        "gpuperf_artifacts, one per test; every kernel is replayed for many more counters, so the capture is slower",
    ),
]
MARKERS = (
    "gpuperf_profile: write a torch.profiler trace (Chrome JSON, opens in Perfetto) of this perf test's steps",
    "gpuperf_ncu: re-run this perf test's steps under Nsight Compute and record its Speed-of-Light verdict",
)
EXTENSION_KEY = pytest.StashKey["ProfilingExtension"]()


def latency_share_option(text: str) -> float | None:
    """``gpuperf_latency_share``: ``auto`` -> None (each device's calibrated default), else a share in 0..1."""
    if str(text).strip().lower() == "auto":
        return None
    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0.0 <= share <= 1.0:  # also NaN
        raise pytest.UsageError(f"gpuperf_latency_share: expected auto or a share in 0..1, got {text!r}")
    return share


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the profiling flags and ini keys."""
    add_options(parser, OPTIONS, "profiling")


def pytest_configure(config: pytest.Config) -> None:
    """Register markers; under ``--gpuperf`` start the profiling extension."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    from pytest_gpuperf.profiling.ncu_capture import child_manifest

    manifest = child_manifest()
    if manifest is not None:  # the child process ncu runs: one capture window per measure(), nothing else
        from pytest_gpuperf.profiling.ncu_child import NcuChildExtension

        top_ops, max_kernels = get_option(config, "gpuperf_ncu_top_ops"), get_option(config, "gpuperf_ncu_max_kernels")
        config.pluginmanager.register(NcuChildExtension(manifest, top_ops, max_kernels), "gpuperf-ncu-child")
        return
    from pytest_gpuperf.profiling.compile_health import CompileHealth
    from pytest_gpuperf.profiling.memory_sites import MemorySites

    config.pluginmanager.register(CompileHealth(), "gpuperf-compile-health")
    config.pluginmanager.register(MemorySites(), "gpuperf-memory-sites")
    from pytest_gpuperf.profiling.extension import ProfilingExtension, ProfilingSettings
    from pytest_gpuperf.profiling.roofs import RoofProvider, RoofStore

    artifacts = Path(get_option(config, "gpuperf_artifacts"))
    if not artifacts.is_absolute():
        artifacts = config.rootpath / artifacts
    share = latency_share_option(get_option(config, "gpuperf_latency_share"))
    settings = ProfilingSettings(
        profile=get_option(config, "--gpuperf-profile"),
        ncu=get_option(config, "--gpuperf-ncu"),
        artifacts_dir=artifacts,
        latency_share=share,
        ncu_timeout=get_option(config, "gpuperf_ncu_timeout"),
        rootdir=config.rootpath,
        xdist=config.pluginmanager.hasplugin("xdist"),
        xdist_worker=hasattr(config, "workerinput"),
        invocation_dir=config.invocation_params.dir,
        inifile=config.inipath,
        invocation_args=tuple(str(a) for a in config.invocation_params.args),
        roofs_always=os.environ.get(ROOFS_ENV, "") == "always",
        ncu_full_report=get_option(config, "gpuperf_ncu_full_report"),
    )
    store = RoofStore(getattr(config, "cache", None))
    roofs = RoofProvider(store, get_option(config, "gpuperf_recalibrate"))
    extension = ProfilingExtension(settings, roofs)
    config.pluginmanager.register(extension, "gpuperf-profiling")
    config.stash[EXTENSION_KEY] = extension


@pytest.fixture
def gpuperf_profile(request: pytest.FixtureRequest) -> list[StepProfile]:
    """Turn on torch.profiler capture for this test (under ``--gpuperf``).

    Returns the list the feature fills with one :class:`StepProfile` per measured step:
    its verdict lines, top kernels and artifact paths (the Chrome trace).
    """
    request.node.stash[PROFILE_REQUESTED_KEY] = True
    return request.node.stash.setdefault(PROFILE_KEY, [])


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note the selected perf tests that asked for ncu capture: they are captured together, in one ncu child."""
    extension = session.config.stash.get(EXTENSION_KEY, None)
    if extension is None:
        return
    items = session.items
    from pytest_gpuperf.profiling.extension import ncu_requested
    from pytest_gpuperf.profiling.ncu_capture import ncu_test_key

    wanted = [
        item
        for item in items
        if "gpuperf" in getattr(item, "fixturenames", ())
        and ncu_requested(item, extension.settings)
        and _runs_on_cuda(item)
    ]
    distributed = {item.nodeid for item in wanted if item.get_closest_marker("gpuperf_distributed") is not None}
    extension.select_ncu_tests({item.nodeid: ncu_test_key(item.path, item.nodeid) for item in wanted}, distributed)
    if wanted:
        from pytest_gpuperf.profiling.ncu_capture import find_ncu

        ncu = find_ncu()
        if ncu is not None:
            extension.prestart_ncu(ncu)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the prestarted ncu child if no test released it (``-x``, a crash before the first ncu test)."""
    extension = session.config.stash.get(EXTENSION_KEY, None)
    if extension is not None:
        extension.discard_ncu()


def _runs_on_cuda(item: pytest.Item) -> bool:
    """True for the ``[cuda]`` instance of a perf test (ncu profiles CUDA kernels only)."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("gpuperf_backend") == "cuda"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Tell the extension which test is measuring, for markers, fixtures and the item's records."""
    extension: ProfilingExtension | None = item.config.stash.get(EXTENSION_KEY, None)
    if extension is not None:
        extension.start_item(item)
    try:
        yield
    finally:
        if extension is not None:
            extension.start_item(None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip early when ncu capture is asked for but ``ncu`` is missing (no time spent measuring)."""
    extension = item.config.stash.get(EXTENSION_KEY, None)
    if extension is None or "gpuperf" not in getattr(item, "fixturenames", ()):
        return
    from pytest_gpuperf.profiling.extension import NCU_MISSING, ncu_requested

    if ncu_requested(item, extension.settings):
        from pytest_gpuperf.profiling.ncu_capture import find_ncu

        if find_ncu() is None:
            pytest.skip(f"{item.nodeid}: {NCU_MISSING}")


def pytest_gpuperf_report_sections(item: pytest.Item) -> list[ReportSection] | None:
    """The profile section (pytest prints it under a failure); its text and artifacts as call-report properties."""
    records = item.stash.get(PROFILE_KEY, None)
    if not records:
        return None
    from pytest_gpuperf.hookspecs import ReportSection

    text = "\n".join(r.text() for r in records)
    properties = [(USER_PROPERTY, text), *((ARTIFACT_PROPERTY, str(p)) for r in records for p in r.artifacts)]
    tables = [table for r in records for table in r.ncu_tables]
    payload = {NCU_PAYLOAD: tables} if tables else {}
    return [ReportSection("profiling", "gpuperf profile", text, tuple(properties), junit=False, payload=payload)]


def pytest_gpuperf_failure_reasons(item: pytest.Item, verdicts: list[Any]) -> list[FailureReason] | None:
    """A ``bound=`` mismatch fails the test, naming it (the profile text itself is the report's section)."""
    mismatches = [m for r in item.stash.get(PROFILE_KEY, None) or [] for m in r.mismatches]
    if not mismatches:
        return None
    from pytest_gpuperf.hookspecs import FailureReason

    text = "\n".join(["pytest-gpuperf: bound assertion failed", *("  " + m for m in mismatches)])
    return [FailureReason("profiling", text, "\n".join(mismatches), "gpuperf profile")]


def pytest_gpuperf_summary_sections(config: pytest.Config, records: list[TestRecord]) -> list[SummarySection] | None:
    """The ``gpuperf profiling`` block: verdict lines and top kernels per test, artifacts, calibrations."""
    if config.stash.get(SESSION_KEY, None) is None or int(getattr(config.option, "verbose", 0) or 0) < 0:
        return None
    texts = [(r.nodeid, value) for r in records for key, value in r.properties if key == USER_PROPERTY]
    artifacts = [value for r in records for key, value in r.properties if key == ARTIFACT_PROPERTY]
    extension = config.stash.get(EXTENSION_KEY, None)
    calibrated = extension.roofs.calibrated if extension is not None else []
    # pytest's verbosity: every test's verdict lines and the measured roofs with -v; by default only the lines that
    # flag something (a counting error, ncu disagreeing, a note) and asked-for artifacts, so a default run shows no
    # block nobody asked for.
    verbose = int(getattr(config.option, "verbose", 0) or 0) > 0
    texts = [(n, t) for n, t in texts if verbose or bool(artifacts) or _flags_something(t)]
    calibrated = calibrated if verbose else []
    tables = [table for r in records for table in r.data.get(NCU_PAYLOAD, [])]
    if not texts and not calibrated and not artifacts:
        return _ncu_section(tables)
    lines = []
    for node_id, text in texts:
        lines += [node_id, *("  " + line for line in text.splitlines())]
    if artifacts:
        folder = os.path.commonpath([os.path.dirname(a) for a in artifacts])
        lines.append(f"profiling artifacts ({len(artifacts)} file(s)) in: {folder}")
    if calibrated and extension is not None:
        lines.append(f"measured roofs for {', '.join(calibrated)}; kept in {extension.roofs.store.where}")
    from pytest_gpuperf.hookspecs import SummarySection

    section = SummarySection("gpuperf profiling", tuple((line, {}) for line in lines), order=10)
    return [section, *(_ncu_section(tables) or [])]


def _ncu_section(tables: list[dict[str, Any]]) -> list[SummarySection] | None:
    """ncu's per-kernel tables of the run in the Markdown summary and the JSON report (``gpuperf.ncu``)."""
    if not tables:
        return None
    from pytest_gpuperf.hookspecs import SummarySection
    from pytest_gpuperf.profiling.ncu_table import markdown_of

    markdown = "\n\n".join(["### Nsight Compute: kernels of each step", *(markdown_of(t) for t in tables)])
    return [SummarySection("", order=11, markdown=markdown, json={"ncu": tables})]


def _flags_something(text: str) -> bool:
    """True when a test's profiling text says something a reader must see without ``-v``."""
    lowered = text.lower()
    return any(word in lowered for word in ("counting error", "note:", "disagree", "warning"))
