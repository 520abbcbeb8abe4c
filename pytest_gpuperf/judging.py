"""The judging service: baseline entries, tolerances, verdicts, and the entries to record.

One object per pytest process (and one per rank task) answers every question a ``measure()``
call asks of the baselines, so there is exactly one place that

* finds a test's baseline entries (by fingerprint *and* world size, through one loader: the
  working tree's files, a git ref's under ``--gpuperf-baseline-ref``, or the entries the pytest
  process sent to a rank);
* picks a metric's tolerance (marker per metric, marker per kind, then the ini default);
* decides which timing metric of a step is judged (:func:`judged_timing_metric`);
* judges metrics (:func:`pytest_gpuperf.compare.judge`) and keeps the verdicts per test;
* collects the entries ``--gpuperf-update`` writes at the end of the session.

The fixture and the ranks use it through the same methods; the session only relays pytest hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_gpuperf.results import KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.baselines.update import BaselineUpdater
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings

#: Reads one baseline file (None when it does not exist).
Loader = Callable[[Path], "BaselineFile | None"]
Entries = dict[str, dict[str, Any]]


def judged_timing_metric(name: str, items: float | None) -> tuple[str, str]:
    """Name and kind of the timing metric judged for step ``name``: throughput when ``items`` is given, else time."""
    if items is None:
        return f"{name}.time", KIND_TIME
    return f"{name}.throughput", KIND_THROUGHPUT


def metric_to_entry(metric: Metric) -> dict[str, Any]:
    """The baseline-file entry for one metric (see :func:`pytest_gpuperf.baselines.update.metric_to_entry`)."""
    from pytest_gpuperf.baselines.update import metric_to_entry as to_entry

    return to_entry(metric)


class BaselineSource(Protocol):
    """Where a judging service reads a test's baseline entries from."""

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The hardware fingerprint (with world size) the test's baselines are keyed by."""
        ...

    def path(self, context: TestContext) -> Path:
        """The baseline file of the test's fingerprint."""
        ...

    def entries(self, context: TestContext) -> Entries:
        """The test's recorded metrics (``{}`` without a baseline); errors name file and line."""
        ...

    def file(self, context: TestContext) -> BaselineFile | None:
        """The whole baseline file of the test's fingerprint (None when absent or not known here)."""
        ...


class FileBaselines:
    """Baseline files under ``settings.baselines_dir``, read once each through ``loader``."""

    def __init__(self, settings: Settings, loader: Callable[[], Loader | None] | None = None) -> None:
        self.settings = settings
        self._loader_factory = loader
        self._loader: Loader | None = None
        self._fingerprints: dict[tuple[str, int], dict[str, Any]] = {}
        self._files: dict[Path, BaselineFile | None] = {}

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The backend's fingerprint plus the context's world size (cached per backend and size)."""
        key = (context.backend.name, context.world_size)
        if key not in self._fingerprints:
            self._fingerprints[key] = {**context.backend.fingerprint(), "world_size": context.world_size}
        return self._fingerprints[key]

    def path(self, context: TestContext) -> Path:
        """Where the baselines of the context's fingerprint live."""
        from pytest_gpuperf.fingerprint import baseline_filename

        return self.settings.baselines_dir / baseline_filename(self.fingerprint(context))

    def loader(self) -> Loader:
        """The loader in use: a feature's (asked once, lazily), else the working tree's files."""
        if self._loader is None:
            from pytest_gpuperf.baselines import load_baseline_file

            self._loader = (self._loader_factory() if self._loader_factory else None) or load_baseline_file
        return self._loader

    def file(self, context: TestContext) -> BaselineFile | None:
        """The loaded baseline file of the context (None if absent); errors fail the test naming file and line."""
        import pytest

        from pytest_gpuperf.baselines import BaselineError
        from pytest_gpuperf.fingerprint import identity

        path = self.path(context)
        if path not in self._files:
            fingerprint = self.fingerprint(context)
            try:
                loaded = self.loader()(path)
                if loaded is not None and identity(loaded.fingerprint) != identity(fingerprint):
                    raise BaselineError(
                        path,
                        f"its fingerprint {identity(loaded.fingerprint)} does not match this machine's "
                        f"{identity(fingerprint)}; the file name and its content disagree",
                        2,
                    )
            except BaselineError as exc:
                pytest.fail(f"pytest-gpuperf: {exc}", pytrace=False)
            self._files[path] = loaded
        return self._files[path]

    def entries(self, context: TestContext) -> Entries:
        """The test's recorded metrics in its baseline file (``{}`` when none)."""
        baseline = self.file(context)
        if baseline is None:
            return {}
        from pytest_gpuperf.selection import backend_first_id  # entries recorded when the backend came first

        found = baseline.tests.get(context.node_id)
        legacy = backend_first_id(context.node_id, context.backend.name)
        return dict(found or (baseline.tests.get(legacy) if legacy else None) or {})


class FixedBaselines:
    """The entries the pytest process looked up for one test, sent to the ranks that measure it (picklable)."""

    def __init__(self, entries: Entries, fingerprint: dict[str, Any] | None = None, path: str = "") -> None:
        self._entries = dict(entries)
        self._fingerprint = dict(fingerprint or {})
        self._path = path

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The fingerprint the pytest process judged with (the rank's own when none was sent)."""
        return self._fingerprint or {**context.backend.fingerprint(), "world_size": context.world_size}

    def path(self, context: TestContext) -> Path:
        """The file the entries came from (informational on a rank)."""
        return Path(self._path)

    def file(self, context: TestContext) -> BaselineFile | None:
        """Ranks see only their test's entries, never a whole file."""
        return None

    def entries(self, context: TestContext) -> Entries:
        """The entries sent with the task."""
        return dict(self._entries)


class Judging:
    """Baseline lookups, tolerances, verdicts and pending updates for the tests of one process."""

    def __init__(self, settings: Settings, baselines: BaselineSource | None = None) -> None:
        self.settings = settings
        self.baselines: BaselineSource = baselines if baselines is not None else FileBaselines(settings)
        self.verdicts: dict[str, list[Verdict]] = {}
        self.contexts: dict[str, TestContext] = {}
        self.pending_updates: dict[Path, tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]] = {}
        #: Under ``--gpuperf-update`` in the pytest process: set by :mod:`pytest_gpuperf.baselines.plugin`.
        self.updater: BaselineUpdater | None = None

    # -- baselines -----------------------------------------------------------------------
    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The fingerprint (with world size) the test is judged under."""
        return self.baselines.fingerprint(context)

    def entries(self, context: TestContext) -> Entries:
        """All recorded metrics of the test (also under ``--gpuperf-update``: a broken file is never overwritten)."""
        return self.baselines.entries(context)

    def entry(self, context: TestContext, metric_name: str) -> dict[str, Any] | None:
        """The baseline entry of one metric to plan and judge against; None when recording or absent."""
        if self.settings.update:
            return None
        entry = self.entries(context).get(metric_name)
        return entry if isinstance(entry, dict) else None

    # -- tolerances --------------------------------------------------------------------------
    def tolerance(self, context: TestContext, metric_name: str, kind: str) -> float:
        """Tolerance of one metric: marker per metric, marker per kind, then the ini default.

        A marker value may be a number or a mapping from backend name to number
        (``time_tolerance={"cuda": 0.15}``); backends it does not name get the default.
        """
        per_metric = context.options.get("tolerances") or {}
        if metric_name in per_metric:
            return float(per_metric[metric_name])

        def pick(key: str, default: float) -> float:
            value = context.option(key, default)
            return float(default if value is None else value)

        if kind == KIND_MEMORY:
            return pick("memory_tolerance", pick("tolerance", self.settings.memory_tolerance))
        if kind in (KIND_TIME, KIND_THROUGHPUT):
            return pick("time_tolerance", pick("tolerance", self.settings.time_tolerance_for(context.backend)))
        return pick("tolerance", self.settings.time_tolerance)

    def metric_tolerance(self, context: TestContext, metric: Metric) -> float:
        """A metric's own tolerance (set by whoever built it) wins over the marker's per-kind one."""
        per_metric = context.options.get("tolerances") or {}
        if metric.tolerance is not None and metric.name not in per_metric:
            return metric.tolerance
        return self.tolerance(context, metric.name, metric.kind)

    @staticmethod
    def informational(context: TestContext) -> set[str]:
        """Metrics recorded and shown but never failing, from ``@pytest.mark.gpuperf(informational=...)``.

        Names are full (``step.throughput``) or short (``throughput``, ``bound``); a mapping per
        backend (``informational={"cuda": ("throughput", "bound")}``) applies to the backends it names.
        """
        value = context.option("informational") or ()
        if isinstance(value, str):
            value = (value,)
        return {str(name) for name in value}

    # -- verdicts ------------------------------------------------------------------------------
    def judge(self, context: TestContext, metrics: list[Metric]) -> list[Verdict]:
        """Judge metrics of one test against the baseline of its hardware and world size."""
        from pytest_gpuperf.compare import judge
        from pytest_gpuperf.fingerprint import describe

        where = describe(self.fingerprint(context))
        entries = self.entries(context)
        informational = self.informational(context)
        verdicts = []
        for metric in metrics:
            if metric.name in informational or metric.name.rpartition(".")[2] in informational:
                metric.judged = False  # recorded and shown, never failing (see informational)
            tolerance = metric.tolerance = self.metric_tolerance(context, metric)
            if self.settings.update:
                verdicts.append(Verdict(metric, "recorded" if metric.judged else "info", tolerance=tolerance))
            else:
                verdicts.append(judge(metric, entries.get(metric.name), tolerance, where))
        return verdicts

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """A suspected time/throughput regression is measured once more before it fails."""
        return self.settings.confirm and any(
            v.status == "regression" and v.metric.kind in (KIND_TIME, KIND_THROUGHPUT) for v in verdicts
        )

    def store(self, context: TestContext, verdicts: list[Verdict]) -> None:
        """Keep verdicts for the report and, under ``--gpuperf-update``, hand the entries to the updater.

        The updater (:class:`~pytest_gpuperf.baselines.update.BaselineUpdater`) validates them (a bad
        value fails this test), keeps entries within tolerance, and commits them when the test passed.
        """
        if self.settings.update:
            path = self.baselines.path(context)
            if self.updater is not None:
                from pytest_gpuperf.fingerprint import describe

                fingerprint = self.fingerprint(context)
                baseline = self.baselines.file(context)
                self.updater.hold(context.node_id, path, fingerprint, verdicts, baseline, describe(fingerprint))
            else:
                from pytest_gpuperf.baselines.update import entries_for

                _, tests = self.pending_updates.setdefault(path, (self.fingerprint(context), {}))
                tests.setdefault(context.node_id, {}).update(entries_for([v.metric for v in verdicts]))
        self.contexts[context.node_id] = context
        self.verdicts.setdefault(context.node_id, []).extend(verdicts)

    def failure_lines(self, node_id: str) -> list[str]:
        """Messages of the verdicts that fail ``node_id`` (regressions, changed categories, strict misses)."""
        verdicts = self.verdicts.get(node_id, [])
        lines = [v.message for v in verdicts if v.failed]
        if self.settings.strict and not self.settings.update:
            lines += [v.message + " (--gpuperf-strict)" for v in verdicts if v.status == "new"]
        return lines

    def report_context(self, node_id: str) -> dict[str, Any]:
        """Fingerprint, baseline file and software differences of a judged test, for reports."""
        from pytest_gpuperf.fingerprint import software_differences

        context = self.contexts.get(node_id)
        if context is None:
            return {}
        fingerprint = self.fingerprint(context)
        baseline = None if self.settings.update else self.baselines.file(context)
        return {
            "fingerprint": fingerprint,
            "baseline_file": str(self.baselines.path(context)),
            "software_changes": software_differences(baseline.fingerprint, fingerprint) if baseline else [],
        }


class CollectingJudging(Judging):
    """The service inside a rank: plans against the sent entries, collects metrics; the world is judged once."""

    def __init__(self, settings: Settings, baselines: BaselineSource) -> None:
        super().__init__(settings, baselines)
        self.metrics: list[Metric] = []

    def judge(self, context: TestContext, metrics: list[Metric]) -> list[Verdict]:
        """No verdicts on a rank: every metric is handed back as information."""
        return [Verdict(metric, "info") for metric in metrics]

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """Confirmation is the pytest process's decision."""
        return False

    def store(self, context: TestContext, verdicts: list[Verdict]) -> None:
        """Collect the metrics for the pytest process."""
        self.metrics.extend(v.metric for v in verdicts)


def entries_mapping(entries: Mapping[str, Any]) -> Entries:
    """A plain, picklable copy of a test's entries (to send with a rank task)."""
    return {str(name): dict(entry) for name, entry in entries.items() if isinstance(entry, Mapping)}
