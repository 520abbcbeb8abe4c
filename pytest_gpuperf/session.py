"""The active ``--gpuperf`` session: baselines in, verdicts out, updates written at the end.

Registered by :mod:`pytest_gpuperf.plugin` only when ``--gpuperf`` (or
``--gpuperf-update``) is given, so a plain pytest run never pays for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.fingerprint import baseline_filename, describe, identity, software_differences
from pytest_gpuperf.results import KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.extensions import MeasureExtension
    from pytest_gpuperf.fixture import GpuPerf
    from pytest_gpuperf.reference import ProbeSet
    from pytest_gpuperf.settings import Settings

REPORT_ATTR = "gpuperf"


def metric_to_entry(metric: Metric) -> dict[str, Any]:
    """The baseline-file entry for one metric."""
    entry: dict[str, Any] = {"value": metric.value, "unit": metric.unit, "better": metric.better, "kind": metric.kind}
    from pytest_gpuperf.stats import spread_subset

    if metric.samples:
        entry["samples"] = spread_subset(metric.samples)
    if metric.normalized:
        entry["normalized"] = spread_subset(metric.normalized)
    if metric.kind in (KIND_TIME, KIND_THROUGHPUT):  # how it was timed, so later runs time it the same way
        for key in ("reference", "method"):
            if metric.extra.get(key):
                entry[key] = metric.extra[key]
    return entry


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """A JSON-able form of a verdict, carried on the test report (survives pytest-xdist)."""
    metric = verdict.metric
    return {
        "metric": metric.name,
        "label": metric.label(),
        "value": metric.value,
        "unit": metric.unit,
        "better": metric.better,
        "kind": metric.kind,
        "status": verdict.status,
        "baseline": verdict.baseline,
        "ratio": verdict.ratio,
        "ci": list(verdict.ci) if verdict.ci else None,
        "tolerance": verdict.tolerance,
        "message": verdict.message,
        "samples": len(metric.samples),
        "sample_values": list(metric.samples),  # raw samples, for the JSON report (pytest-benchmark stats)
        "extra": {k: v for k, v in metric.extra.items() if isinstance(v, (int, float, str, bool))},
    }


class GpuperfSession:
    """Holds settings, loaded baselines and per-test verdicts for one pytest run."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self._fingerprints: dict[tuple[str, int], dict[str, Any]] = {}
        self._baselines: dict[Path, BaselineFile | None] = {}
        self._probes: dict[str, ProbeSet] = {}
        self.verdicts: dict[str, list[Verdict]] = {}
        self.pending_updates: dict[Path, tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]] = {}
        self.reported: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []
        self.written: list[Path] = []
        self.update_errors: list[str] = []
        #: Feature modules (profiling, roofline ...) append objects with an ``after_measure`` method.
        self.extensions: list[MeasureExtension] = []
        #: Reads one baseline file (the reporting feature swaps in a reader of a git ref).
        self.baseline_loader: Callable[[Path], BaselineFile | None] | None = None

    # -- hardware and baselines -------------------------------------------------
    def fingerprint_for(self, backend: Backend, world_size: int | None = None) -> dict[str, Any]:
        """The backend's fingerprint plus the world size (given, else this process's WORLD_SIZE; cached)."""
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        key = (backend.name, world_size)
        if key not in self._fingerprints:
            self._fingerprints[key] = {**backend.fingerprint(), "world_size": world_size}
        return self._fingerprints[key]

    def baseline_path(self, fingerprint: dict[str, Any]) -> Path:
        """Where the baselines of this fingerprint live."""
        return self.settings.baselines_dir / baseline_filename(fingerprint)

    def baseline_for(self, fingerprint: dict[str, Any]) -> BaselineFile | None:
        """The loaded baseline file for ``fingerprint`` (None if absent); errors name file and line."""
        from pytest_gpuperf.baselines import BaselineError, load_baseline_file

        path = self.baseline_path(fingerprint)
        if path not in self._baselines:
            try:
                loaded = (self.baseline_loader or load_baseline_file)(path)
            except BaselineError as exc:
                pytest.fail(f"pytest-gpuperf: {exc}", pytrace=False)
            if loaded is not None and identity(loaded.fingerprint) != identity(fingerprint):
                raise BaselineError(
                    path,
                    f"its fingerprint {identity(loaded.fingerprint)} does not match this machine's "
                    f"{identity(fingerprint)}; the file name and its content disagree",
                    2,
                )
            self._baselines[path] = loaded
        return self._baselines[path]

    def probes_for(self, backend: Backend) -> ProbeSet:
        """The backend's drift probes (matmul, copy), built and rated once per session."""
        from pytest_gpuperf.reference import ProbeSet

        probes = self._probes.get(backend.name)
        if probes is None:
            probes = self._probes[backend.name] = ProbeSet.for_backend(backend)
        return probes

    def release_probes(self, backend: Backend) -> None:
        """Drop the backend's probes after a measure(): their tensors must not count in the next peak reading."""
        self._probes.pop(backend.name, None)

    # -- judging ---------------------------------------------------------------
    def tolerance_for(self, handle: GpuPerf, metric: Metric) -> float:
        """Tolerance of one metric: marker per-metric, marker per-kind, then ini default.

        A marker value may be a number or a mapping from backend name to number
        (``time_tolerance={"cuda": 0.15}``); backends it does not name get the default.
        """
        options = handle.options
        backend = handle.backend.name

        def pick(key: str, default: float) -> float:
            value = options.get(key, default)
            if isinstance(value, dict):
                value = value.get(backend, default)
            return float(value)

        per_metric = options.get("tolerances") or {}
        if metric.name in per_metric:
            return float(per_metric[metric.name])
        if metric.tolerance is not None:
            return metric.tolerance
        if metric.kind == KIND_MEMORY:
            return pick("memory_tolerance", pick("tolerance", self.settings.memory_tolerance))
        if metric.kind in (KIND_TIME, KIND_THROUGHPUT):
            return pick("time_tolerance", pick("tolerance", self.settings.time_tolerance_for(handle.backend)))
        return pick("tolerance", self.settings.time_tolerance)

    def informational_for(self, handle: GpuPerf) -> set[str]:
        """Metrics a test records and shows but never fails on, from ``@pytest.mark.gpuperf(informational=...)``.

        Names are full (``step.throughput``) or short (``throughput``, ``bound``); a mapping per
        backend (``informational={"cuda": ("throughput", "bound")}``) applies to the backends it names.
        """
        value = handle.options.get("informational") or ()
        if isinstance(value, dict):
            value = value.get(handle.backend.name, ())
        if isinstance(value, str):
            value = (value,)
        return {str(name) for name in value}

    def judge(self, handle: GpuPerf, metrics: list[Metric]) -> list[Verdict]:
        """Judge metrics of one test against the baseline of its hardware."""
        from pytest_gpuperf.compare import judge

        fingerprint = self.fingerprint_for(handle.backend, getattr(handle, "world_size", None))
        where = describe(fingerprint)
        baseline = self.baseline_for(fingerprint)  # also under --gpuperf-update: never overwrite a broken file
        entries = (baseline.tests.get(handle.node_id) if baseline else None) or {}
        informational = self.informational_for(handle)
        verdicts = []
        for metric in metrics:
            if metric.name in informational or metric.name.rpartition(".")[2] in informational:
                metric.judged = False  # recorded and shown, never failing (see informational_for)
            tolerance = self.tolerance_for(handle, metric)
            metric.tolerance = tolerance
            if self.settings.update:
                verdicts.append(Verdict(metric, "recorded" if metric.judged else "info", tolerance=tolerance))
            else:
                verdicts.append(judge(metric, entries.get(metric.name), tolerance, where))
        return verdicts

    def should_confirm(self, verdicts: list[Verdict]) -> bool:
        """A suspected time/throughput regression is measured once more before it fails."""
        return self.settings.confirm and any(
            v.status == "regression" and v.metric.kind in (KIND_TIME, KIND_THROUGHPUT) for v in verdicts
        )

    def store(self, handle: GpuPerf, verdicts: list[Verdict]) -> None:
        """Keep verdicts for the report and, under ``--gpuperf-update``, the entries to write."""
        self.verdicts.setdefault(handle.node_id, []).extend(verdicts)
        if self.settings.update:
            fingerprint = self.fingerprint_for(handle.backend, getattr(handle, "world_size", None))
            path = self.baseline_path(fingerprint)
            _, tests = self.pending_updates.setdefault(path, (fingerprint, {}))
            metrics = tests.setdefault(handle.node_id, {})
            for verdict in verdicts:
                metrics[verdict.metric.name] = metric_to_entry(verdict.metric)

    def failure_lines(self, node_id: str, backend: Backend | None) -> list[str]:
        """Messages of the verdicts that fail ``node_id`` (regressions, changed categories, strict misses)."""
        lines = [v.message for v in self.verdicts.get(node_id, []) if v.failed]
        if self.settings.strict and not self.settings.update:
            lines += [v.message + " (--gpuperf-strict)" for v in self.verdicts.get(node_id, []) if v.status == "new"]
        return lines

    def context_for(self, backend: Backend, world_size: int | None = None) -> dict[str, Any]:
        """Fingerprint and software differences against the recorded baseline, for reports."""
        fingerprint = self.fingerprint_for(backend, world_size)
        baseline = None if self.settings.update else self.baseline_for(fingerprint)
        return {
            "fingerprint": fingerprint,
            "baseline_file": str(self.baseline_path(fingerprint)),
            "software_changes": software_differences(baseline.fingerprint, fingerprint) if baseline else [],
        }

    # -- hooks -----------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        """Fail the test's call phase when one of its metrics regressed; attach verdicts to the report."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when != "call":
            return
        verdicts = self.verdicts.get(item.nodeid)
        if not verdicts:
            return
        backend = getattr(item, "_gpuperf_backend", None)
        payload = [verdict_to_dict(v) for v in verdicts]
        context = self.context_for(backend, getattr(item, "_gpuperf_world_size", None)) if backend is not None else {}
        setattr(report, REPORT_ATTR, {"verdicts": payload, **context})
        for verdict in verdicts:
            value = f"{verdict.metric.value} {verdict.metric.unit}".strip()
            prop = (f"gpuperf.{verdict.metric.name}", f"{value} [{verdict.status}]")
            report.user_properties.append(prop)
            item.user_properties.append(prop)  # junitxml writes the teardown report's, which copies the item's
        from pytest_gpuperf.report import metric_section

        report.sections.append(("gpuperf metrics", metric_section(payload)))
        failures = self.failure_lines(item.nodeid, backend)
        if failures and report.passed:
            report.outcome = "failed"
            header = "pytest-gpuperf: performance regression" + ("s" if len(failures) > 1 else "")
            hint = (
                "If this change is intended, record it with: "
                f"pytest --gpuperf --gpuperf-update '{item.nodeid}' and commit the baselines/ diff."
            )
            report.longrepr = "\n".join([header, *("  " + line for line in failures), hint])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect verdicts from reports (also those coming back from xdist workers)."""
        data = getattr(report, REPORT_ATTR, None)
        if report.when == "call" and data:
            self.reported.append((report.nodeid, data, data.get("verdicts", [])))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the baseline updates of this process (each xdist worker writes its own, under a lock)."""
        if not self.pending_updates:
            return
        from pytest_gpuperf.baselines import BaselineError, update_baseline_file

        for path, (fingerprint, tests) in sorted(self.pending_updates.items()):
            try:
                update_baseline_file(path, fingerprint, tests)
            except (BaselineError, OSError) as exc:
                self.update_errors.append(f"pytest-gpuperf: baselines not recorded: {exc}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            else:
                self.written.append(path)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The per-test metric table: baseline, measured, change, verdict."""
        from pytest_gpuperf.report import write_terminal_summary

        write_terminal_summary(terminalreporter, self)
