"""The gate: a normal run's sink. Each metric is judged against its entry, a suspect is confirmed, a regression fails.

* :meth:`Gate.verdicts`: one metric against its entry (:func:`pytest_gpuperf.judging.compare.judge`), a timing
  verdict decided on cycles when the SM clock moved (:mod:`.clock_rule`), made inconclusive when the evidence
  cannot decide (:mod:`.evidence`, :mod:`.machine_rule`, :mod:`.work`), a failing or inconclusive one saying how
  the step's kernels moved (:mod:`.kernel_diff`);
* :meth:`Gate.confirm`: a suspect re-judged with a second measurement; one that disagrees is inconclusive
  (:func:`pytest_gpuperf.judging.replication.reconcile`);
* :meth:`Gate.failure_lines`: regressions, changed categories, and under ``--gpuperf-strict`` missing baselines
  and inconclusive verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.judging.sink import FreshRuns, Lookup, Sink
from pytest_gpuperf.results import KIND_HOST, KIND_THROUGHPUT, KIND_TIME, KIND_WORK, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.judging.sources import Entries, StoredFile
    from pytest_gpuperf.settings import Settings


class Gate(Sink):
    """Judge, confirm, fail: what a normal ``--gpuperf`` run does with a test's metrics."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def verdicts(self, lookup: Lookup, metrics: list[Metric]) -> list[Verdict]:
        """Judge metrics of one test against the baseline of its hardware and world size."""
        from pytest_gpuperf.judging.work import explain_timing, unrecorded

        where, entries = lookup.where(), lookup.entries()
        lookup.prepare(metrics)
        by_name = {m.name: m for m in metrics}
        verdicts = []
        for metric in metrics:
            if metric.kind == KIND_WORK and metric.judged and entries and metric.name not in entries:
                verdicts.append(unrecorded(metric))  # a baseline from before counted work was stored
                continue
            cycles = _cycles_of(metric, by_name, entries)
            tolerance = metric.tolerance or 0.0
            verdicts.append(
                judge_one(metric, entries.get(metric.name), tolerance, where, cycles=cycles, node_id=lookup.node_id)
            )
        from pytest_gpuperf.judging.kernel_diff import explain_kernels

        return explain_kernels(explain_timing(_explain_bounds(verdicts, entries)), entries)

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """A suspected time/throughput regression is measured once more before it fails."""
        return bool(self.settings.confirm) and bool(suspects(verdicts))

    def confirm(
        self, lookup: Lookup, first: list[Verdict], again: dict[str, Metric] | None, note: str, where: str
    ) -> list[Verdict]:
        """Re-judge the suspects of ``first`` with the metrics measured ``again`` (None: could not be measured)."""
        from pytest_gpuperf.judging.evidence import MACHINE, inconclusive
        from pytest_gpuperf.judging.machine_rule import machine_change
        from pytest_gpuperf.judging.replication import reconcile

        entries, described = lookup.entries(), lookup.where()
        out = []
        for verdict in first:
            metric = (again or {}).get(verdict.metric.name)
            if verdict not in suspects([verdict]):
                out.append(verdict)
                continue
            if metric is None:
                out.append(reconcile(verdict, None, note or "the confirmation did not measure it", where))
                continue
            metric.judged, metric.tolerance = verdict.metric.judged, verdict.tolerance
            if "bound" in verdict.metric.extra:
                metric.extra.setdefault("bound", verdict.metric.extra["bound"])
            tolerance = verdict.tolerance or 0.0
            cycles = _cycles_of(metric, again or {}, entries)
            # The confirmation's own measured change decides agreement (its run conditions were the first's doubt).
            again_verdict = judge_one(
                metric, entries.get(metric.name), tolerance, described, evidence=False, cycles=cycles
            )
            # The fresh process's own calibration:
            elsewhere = machine_change(metric.extra, entries.get(metric.name), tolerance or None)
            if elsewhere and again_verdict.status == (verdict.suspected or verdict.status):
                out.append(inconclusive(verdict, f"{where} agreed, but there {elsewhere}", MACHINE))
                continue
            entry = entries.get(metric.name)
            out.append(reconcile(verdict, again_verdict, where=where, node_id=lookup.node_id, entry=entry))
        from pytest_gpuperf.judging.kernel_diff import explain_kernels

        return explain_kernels(out, entries)  # a verdict the confirmation replaced says its kernels too

    def second_look(
        self, lookup: Lookup, verdicts: list[Verdict], fresh: FreshRuns, where: str
    ) -> tuple[list[Verdict], str | None]:
        """A suspected regression measured again in fresh processes (2 for a host-CPU timing,
        :func:`~pytest_gpuperf.judging.replication.confirmations`); one that disagrees makes it inconclusive."""
        from pytest_gpuperf.judging.replication import confirmations

        if not self.wants_confirmation(verdicts):
            return verdicts, None
        runs, note = fresh(confirmations(suspects(verdicts)))  # a host-CPU suspect: each of 2 must agree
        verdicts = self.confirm(lookup, verdicts, runs[0] if runs else None, note, where)
        for again in runs[1:]:
            verdicts = self.confirm(lookup, verdicts, again, note, where)
        return verdicts, None

    def failure_lines(self, verdicts: list[Verdict]) -> list[str]:
        """Regressions and changed categories; under ``--gpuperf-strict`` also missing and inconclusive ones."""
        lines = super().failure_lines(verdicts)
        if self.settings.strict:
            lines += [v.message + " (--gpuperf-strict)" for v in verdicts if v.status == "new"]
            lines += [f"{v.message} (--gpuperf-strict)" for v in verdicts if v.status == "inconclusive"]
        return lines

    def judged_file(self, lookup: Lookup) -> StoredFile | None:
        """The baseline file the test was judged against."""
        return lookup.file()


def judge_one(
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
    from pytest_gpuperf.judging.clock_rule import on_cycles
    from pytest_gpuperf.judging.compare import judge
    from pytest_gpuperf.judging.evidence import inconclusive, timing_reason

    verdict = judge(metric, entry, tolerance, where, node_id)
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


def suspects(verdicts: list[Verdict]) -> list[Verdict]:
    """Suspected time/throughput regressions: measured again (in a fresh process when possible) before failing.

    Also those made inconclusive only by their run's conditions (unsettled, contended) or by a host speed state
    a fresh process may not share (:data:`~pytest_gpuperf.judging.evidence.CLEARABLE`): another run may clear them;
    and those whose clock band straddled the tolerance (doubt ``clock``): a fresh process that reads the change past
    it too decides with them (:mod:`pytest_gpuperf.judging.agreement`).
    """
    from pytest_gpuperf.judging.clock_facts import CLOCK
    from pytest_gpuperf.judging.evidence import CLEARABLE
    from pytest_gpuperf.judging.work import WORKLOAD

    return [
        v
        for v in verdicts
        if v.metric.kind in (KIND_TIME, KIND_THROUGHPUT, KIND_HOST)
        and not v.metric.extra.get(WORKLOAD)  # a changed workload fails on its counted work, whatever its time reads
        and (v.status == "regression" or (v.suspected == "regression" and v.doubt in (*CLEARABLE, CLOCK)))
    ]


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


def _cycles_of(
    metric: Metric, metrics: Mapping[str, Metric], entries: Entries
) -> tuple[Metric | None, dict[str, Any] | None]:
    """The cycles metric and entry of a timing metric's step (``(None, None)`` for other metrics)."""
    if metric.kind not in (KIND_TIME, KIND_THROUGHPUT):
        return None, None
    name = metric.name.rpartition(".")[0] + ".cycles"
    entry = entries.get(name)
    return metrics.get(name), entry if isinstance(entry, dict) else None
