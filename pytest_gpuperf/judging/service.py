"""The judging service: baseline entries, tolerances, verdicts, and the entries to record.

One object per pytest process (and one per rank task) answers every question a ``measure()``
call asks of the baselines, so there is exactly one place that

* finds a test's baseline entries (by fingerprint *and* world size, through one loader: the
  working tree's files, a git ref's under ``--gpuperf-baseline-ref``, or the entries the pytest
  process sent to a rank);
* picks a metric's tolerance (marker per metric, marker per kind, then the ini default);
* decides which timing metric of a step is judged (:func:`judged_timing_metric`);
* judges metrics (:func:`pytest_gpuperf.judging.compare.judge`) and keeps the verdicts per test;
* collects the entries ``--gpuperf-update`` writes at the end of the session.

The fixture and the ranks (:class:`~.collecting.CollectingJudging`) use it through the same methods; the session
only relays pytest hooks. Tolerances: :mod:`.tolerances`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.baselines.sources import BaselineSource, Entries, FileBaselines, FixedBaselines, Loader
from pytest_gpuperf.judging import tolerances
from pytest_gpuperf.results import KIND_HOST, KIND_THROUGHPUT, KIND_TIME, KIND_WORK, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.update import BaselineUpdater
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings

__all__ = ["BaselineSource", "Entries", "FileBaselines", "FixedBaselines", "Judging", "Loader"]


def judged_timing_metric(name: str, items: float | None) -> tuple[str, str]:
    """Name and kind of the timing metric judged for step ``name``: throughput when ``items`` is given, else time."""
    if items is None:
        return f"{name}.time", KIND_TIME
    return f"{name}.throughput", KIND_THROUGHPUT


def metric_to_entry(metric: Metric) -> dict[str, Any]:
    """The baseline-file entry for one metric (see :func:`pytest_gpuperf.baselines.update.metric_to_entry`)."""
    from pytest_gpuperf.baselines.update import metric_to_entry as to_entry

    return to_entry(metric)


class Judging:
    """Baseline lookups, tolerances, verdicts and pending updates for the tests of one process."""

    def __init__(self, settings: Settings, baselines: BaselineSource | None = None) -> None:
        self.settings = settings
        self.baselines: BaselineSource = baselines if baselines is not None else FileBaselines(settings)
        self.verdicts: dict[str, list[Verdict]] = {}
        self.contexts: dict[str, TestContext] = {}
        self.pending_updates: dict[Path, tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]] = {}
        #: Under ``--gpuperf-update`` in the pytest process: made by :meth:`start_updates`.
        self.updater: BaselineUpdater | None = None

    def start_updates(self, update_all: bool = False, accept_slower: bool = False) -> BaselineUpdater:
        """Under ``--gpuperf-update``: the updater that validates, holds and writes this process's entries."""
        from pytest_gpuperf.baselines.update import BaselineUpdater

        self.updater = BaselineUpdater(self.pending_updates, update_all, accept_slower)
        return self.updater

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

    def stored_entry(self, context: TestContext, metric_name: str) -> dict[str, Any] | None:
        """The entry the baseline file holds, also when recording; None under ``--gpuperf-update-all``."""
        if self.updater is not None and self.updater.update_all:
            return None
        entry = self.entries(context).get(metric_name)
        return entry if isinstance(entry, dict) else None

    # -- tolerances (:mod:`.tolerances`) ------------------------------------------------------
    def tolerance(self, context: TestContext, metric_name: str, kind: str) -> float:
        """Tolerance of one metric: marker per metric, marker per kind, then the ini default."""
        return tolerances.tolerance(self.settings, context, metric_name, kind)

    def metric_tolerance(self, context: TestContext, metric: Metric) -> float:
        """A metric's own tolerance (set by whoever built it) wins over the marker's per-kind one."""
        return tolerances.metric_tolerance(self.settings, context, metric)

    @staticmethod
    def informational(context: TestContext) -> set[str]:
        """Metrics recorded and shown but never failing (``@pytest.mark.gpuperf(informational=...)``)."""
        return tolerances.informational(context)

    # -- verdicts ------------------------------------------------------------------------------
    def judge(self, context: TestContext, metrics: list[Metric]) -> list[Verdict]:
        """Judge metrics of one test against the baseline of its hardware and world size."""
        from pytest_gpuperf.fingerprint import describe

        where = describe(self.fingerprint(context))
        entries = self.entries(context)
        informational = self.informational(context)
        by_name = {m.name: m for m in metrics}
        _note_bounds(metrics, entries)
        verdicts = []
        for metric in metrics:
            if metric.name in informational or metric.name.rpartition(".")[2] in informational:
                metric.judged = False  # recorded and shown, never failing (see informational)
            tolerance = metric.tolerance = self.metric_tolerance(context, metric)
            if self.settings.update:
                verdicts.append(Verdict(metric, "recorded" if metric.judged else "info", tolerance=tolerance))
            elif metric.kind == KIND_WORK and metric.judged and entries and metric.name not in entries:
                from pytest_gpuperf.judging.work import unrecorded

                verdicts.append(unrecorded(metric))  # a baseline from before counted work was stored
            else:
                cycles = _cycles_of(metric, by_name, entries)
                entry = entries.get(metric.name)
                verdicts.append(
                    self._judge_one(metric, entry, tolerance, where, cycles=cycles, node_id=context.node_id)
                )
        from pytest_gpuperf.judging.work import explain_timing

        return explain_timing(self._explain_bounds(verdicts, entries))

    @staticmethod
    def _judge_one(
        metric: Metric,
        entry: dict[str, Any] | None,
        tolerance: float,
        where: str,
        evidence: bool = True,
        cycles: tuple[Metric | None, dict[str, Any] | None] = (None, None),
        node_id: str = "",
    ) -> Verdict:
        """One metric against its entry; inconclusive when the ``evidence`` cannot decide (:mod:`.evidence`).

        ``cycles`` (the step's cycles metric and its entry) decide a timing verdict whose SM clock moved
        (:mod:`pytest_gpuperf.judging.clock_rule`).
        """
        from dataclasses import replace

        from pytest_gpuperf.judging.clock_rule import on_cycles
        from pytest_gpuperf.judging.compare import judge
        from pytest_gpuperf.judging.evidence import inconclusive, timing_reason

        verdict = judge(metric, entry, tolerance, where)
        by_cycles = on_cycles(verdict, entry, cycles[0], cycles[1], where)
        verdict = by_cycles or verdict
        mdc = (entry or {}).get("min_detectable_change")
        if isinstance(mdc, (int, float)) and metric.kind in (KIND_TIME, KIND_THROUGHPUT) and verdict.message:
            metric.extra["min_detectable_change"] = mdc
            verdict = replace(verdict, message=f"{verdict.message}; smallest detectable slowdown {mdc:.0%}")
        doubt = timing_reason(verdict, entry, node_id, clock_decided=by_cycles is not None) if evidence else None
        if doubt:
            return inconclusive(verdict, doubt[1], doubt[0])
        if verdict.status == "regression" and metric.kind in (KIND_TIME, KIND_THROUGHPUT):
            from pytest_gpuperf.judging.machine_rule import missing_note

            note = missing_note(metric.extra, entry)
            verdict = replace(verdict, message=f"{verdict.message}; {note}") if note else verdict
        return verdict

    @staticmethod
    def _explain_bounds(verdicts: list[Verdict], entries: Entries) -> list[Verdict]:
        """A bound class that changed while the step's FLOPs per byte did not is inconclusive (a speed effect)."""
        from pytest_gpuperf.judging.evidence import BOUND, bound_reason, inconclusive

        intensity = {v.metric.name: v.metric.value for v in verdicts if v.metric.name.endswith(".arithmetic_intensity")}
        out = []
        for verdict in verdicts:
            step = verdict.metric.name.rpartition(".")[0]
            reason = bound_reason(verdict, entries, intensity.get(f"{step}.arithmetic_intensity"))
            out.append(inconclusive(verdict, reason, BOUND) if reason else verdict)
        return out

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """A suspected time/throughput regression is measured once more before it fails."""
        return self.settings.confirm and bool(suspects(verdicts))

    def confirm(
        self,
        context: TestContext,
        first: list[Verdict],
        again: dict[str, Metric] | None,
        note: str = "",
        where: str = "a fresh process",
    ) -> list[Verdict]:
        """Re-judge the suspects of ``first`` with the metrics measured ``again`` (None: could not be measured)."""
        from pytest_gpuperf.fingerprint import describe
        from pytest_gpuperf.judging.replication import reconcile

        entries, described = self.entries(context), describe(self.fingerprint(context))
        out = []
        for verdict in first:
            if verdict not in suspects([verdict]):
                out.append(verdict)
                continue
            metric = (again or {}).get(verdict.metric.name)
            if metric is None:
                out.append(reconcile(verdict, None, note or "the confirmation did not measure it", where))
                continue
            metric.judged, metric.tolerance = verdict.metric.judged, verdict.tolerance
            if "bound" in verdict.metric.extra:
                metric.extra.setdefault("bound", verdict.metric.extra["bound"])
            tolerance = verdict.tolerance or 0.0
            cycles = _cycles_of(metric, again or {}, entries)
            # The confirmation's own measured change decides agreement (its run conditions were the first's doubt).
            again_verdict = self._judge_one(
                metric, entries.get(metric.name), tolerance, described, evidence=False, cycles=cycles
            )
            from pytest_gpuperf.judging.evidence import MACHINE, inconclusive
            from pytest_gpuperf.judging.machine_rule import machine_change

            # The fresh process's own calibration:
            elsewhere = machine_change(metric.extra, entries.get(metric.name), tolerance or None)
            if elsewhere and again_verdict.status == (verdict.suspected or verdict.status):
                out.append(inconclusive(verdict, f"{where} agreed, but there {elsewhere}", MACHINE))
                continue
            out.append(reconcile(verdict, again_verdict, where=where, node_id=context.node_id))
        return out

    def confirm_stored(
        self, node_id: str, again: dict[str, Metric] | None, note: str = "", where: str = "a fresh process"
    ) -> None:
        """:meth:`confirm` the stored verdicts of a test (after its body ran) with a fresh process's metrics."""
        context = self.contexts.get(node_id)
        if context is not None and suspects(self.verdicts.get(node_id, [])):
            self.verdicts[node_id] = self.confirm(context, self.verdicts[node_id], again, note, where)

    def merge_processes(self, node_id: str, runs: list[dict[str, Metric]], include_main: bool = True) -> None:
        """Under ``--gpuperf-update``: store each timing metric from this and the fresh processes' measurements
        (``include_main`` False: from the fresh ones alone)."""
        from pytest_gpuperf.judging.replication import combine, is_timing

        context = self.contexts.get(node_id)
        if context is None:
            return
        merged, timing = [], []
        for verdict in self.verdicts.get(node_id, []):
            metric = verdict.metric
            if is_timing(metric) and any(metric.name in run for run in runs):  # others' merged facts kept
                others = [run[metric.name] for run in runs if metric.name in run]
                metric = combine(metric, others, verdict.tolerance or 0, include_main)
            merged.append(Verdict(metric, verdict.status, tolerance=verdict.tolerance))
            if metric is not verdict.metric:
                timing.append(merged[-1])
        self.verdicts[node_id] = merged
        if timing:
            self._hold(context, self.baselines.path(context), timing)

    def warnings_for(self, node_id: str) -> list[str]:
        """What the user should see even when the test passes: inconclusive verdicts, tolerances below the noise."""
        from pytest_gpuperf.judging.replication import tolerance_warning

        lines = []
        for verdict in self.verdicts.get(node_id, []):
            if verdict.status == "inconclusive" and not self.settings.strict:
                lines.append(f"{node_id}: {verdict.message} (passes; --gpuperf-strict fails it)")
            warning = tolerance_warning(verdict.metric, node_id) if self.settings.update else None
            if warning:
                lines.append(f"{node_id}: {warning}")
        return lines

    def store(self, context: TestContext, verdicts: list[Verdict]) -> None:
        """Keep verdicts for the report and, under ``--gpuperf-update``, hand the entries to the updater.

        The updater (:class:`~pytest_gpuperf.baselines.update.BaselineUpdater`) validates them (a bad
        value fails this test), keeps entries within tolerance, and commits them when the test passed.
        """
        if self.settings.update:
            path = self.baselines.path(context)
            for verdict in verdicts:
                _note_single_process(verdict)  # the noise facts its entry stores (replaced by N processes' ones)
            self._hold(context, path, verdicts)
        self.contexts[context.node_id] = context
        self.verdicts.setdefault(context.node_id, []).extend(verdicts)

    def report_instead(self, node_id: str, context: TestContext, verdicts: list[Verdict]) -> None:
        """Report ``verdicts`` for ``node_id`` in place of those stored (a feature's own judgement: A/B)."""
        self.contexts[node_id] = context
        self.verdicts[node_id] = list(verdicts)

    def _hold(self, context: TestContext, path: Path, verdicts: list[Verdict]) -> None:
        """Hand ``verdicts``' entries to the updater (validated, kept when within tolerance), or collect them."""
        if self.updater is not None:
            from pytest_gpuperf.fingerprint import describe

            fingerprint = self.fingerprint(context)
            baseline = self.baselines.file(context)
            self.updater.hold(context.node_id, path, fingerprint, verdicts, baseline, describe(fingerprint))
        else:
            from pytest_gpuperf.baselines.update import entries_for

            _, tests = self.pending_updates.setdefault(path, (self.fingerprint(context), {}))
            tests.setdefault(context.node_id, {}).update(entries_for([v.metric for v in verdicts]))

    def failure_lines(self, node_id: str) -> list[str]:
        """Messages of the verdicts that fail ``node_id`` (regressions, changed categories, strict misses)."""
        verdicts = self.verdicts.get(node_id, [])
        lines = [v.message for v in verdicts if v.failed]
        if self.settings.strict and not self.settings.update:
            lines += [v.message + " (--gpuperf-strict)" for v in verdicts if v.status == "new"]
            lines += [f"{v.message} (--gpuperf-strict)" for v in verdicts if v.status == "inconclusive"]
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


def suspects(verdicts: list[Verdict]) -> list[Verdict]:
    """Suspected time/throughput regressions: measured again (in a fresh process when possible) before failing.

    Also those made inconclusive only by their run's conditions (unsettled, contended) or by a host speed state
    a fresh process may not share (:data:`~pytest_gpuperf.judging.evidence.CLEARABLE`): another run may clear them.
    """
    from pytest_gpuperf.judging.evidence import CLEARABLE

    return [
        v
        for v in verdicts
        if v.metric.kind in (KIND_TIME, KIND_THROUGHPUT, KIND_HOST)
        and (v.status == "regression" or (v.suspected == "regression" and v.doubt in CLEARABLE))
    ]


def _cycles_of(
    metric: Metric, metrics: Mapping[str, Metric], entries: Entries
) -> tuple[Metric | None, dict[str, Any] | None]:
    """The cycles metric and entry of a timing metric's step (``(None, None)`` for other metrics)."""
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT):
        return None, None
    name = metric.name.rpartition(".")[0] + ".cycles"
    entry = entries.get(name)
    return metrics.get(name), entry if isinstance(entry, dict) else None


def _note_bounds(metrics: list[Metric], entries: Entries) -> None:
    """Give each timing metric its step's bound class (this run's, else the baseline's): the clock rule reads it."""
    run = {m.name.rpartition(".")[0]: m.value for m in metrics if m.name.endswith(".bound")}
    for metric in metrics:
        if metric.kind in (KIND_TIME, KIND_THROUGHPUT):
            step = metric.name.rpartition(".")[0]
            stored = entries.get(f"{step}.bound")
            bound = run.get(step, stored.get("value") if isinstance(stored, dict) else None)
            if isinstance(bound, str):
                metric.extra["bound"] = bound


def _note_single_process(verdict: Verdict) -> None:
    """A recorded timing metric's noise facts from its own process (replaced when fresh processes add theirs)."""
    from pytest_gpuperf.judging.replication import is_timing, noise_facts

    metric = verdict.metric
    if is_timing(metric) and "processes" not in metric.extra:
        precision = metric.extra.get("precision")
        within = float(precision) if isinstance(precision, (int, float)) else 0.0
        metric.extra.update(noise_facts([float(metric.value)], within, verdict.tolerance or 0.0))
