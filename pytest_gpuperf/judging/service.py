"""The judging service: baseline entries, tolerances and the verdicts of each test, handed to the run's sink.

One object per pytest process (and one per rank task) answers every question a ``measure()`` call asks of the
baselines, so there is exactly one place that

* finds a test's baseline entries (by fingerprint *and* world size) through the source it was given
  (:class:`~pytest_gpuperf.judging.sources.BaselineSource`: the working tree's files or a git ref's, built by the
  session; or the entries the pytest process sent to a rank);
* picks a metric's tolerance (marker per metric, marker per kind, then the ini default: :mod:`.tolerances`);
* decides which timing metric of a step is judged (:func:`judged_timing_metric`);
* keeps each test's verdicts and context for the reports.

What happens to a test's metrics is the sink's (:mod:`.sink`), chosen once when the service is built: the gate
judges them (:class:`~.gate.Gate`, the default), the recorder records them (``--gpuperf-update``:
:class:`pytest_gpuperf.baselines.recording.Recorder`), a rank collects them (:class:`~.collecting.Collector`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_gpuperf.judging import tolerances
from pytest_gpuperf.judging.gate import Gate, suspects
from pytest_gpuperf.judging.sink import FreshRuns, Lookup, Sink
from pytest_gpuperf.judging.sources import BaselineSource, Entries, FixedBaselines
from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings

__all__ = ["BaselineSource", "Entries", "FixedBaselines", "Judging", "judged_timing_metric", "suspects"]


def judged_timing_metric(name: str, items: float | None) -> tuple[str, str]:
    """Name and kind of the timing metric judged for step ``name``: throughput when ``items`` is given, else time."""
    if items is None:
        return f"{name}.time", KIND_TIME
    return f"{name}.throughput", KIND_THROUGHPUT


class Judging:
    """Baseline lookups, tolerances and verdicts for the tests of one process; the ``sink`` decides what happens.

    ``baselines`` is where the entries come from (the caller builds it: the session the baseline files', a rank
    the entries it was sent); ``sink`` defaults to the :class:`~.gate.Gate` of a normal run.
    """

    def __init__(self, settings: Settings, baselines: BaselineSource, sink: Sink | None = None) -> None:
        self.settings = settings
        self.baselines = baselines
        self.sink: Sink = sink if sink is not None else Gate(settings)
        self.verdicts: dict[str, list[Verdict]] = {}
        self.contexts: dict[str, TestContext] = {}

    @property
    def recording(self) -> bool:
        """True when this run records baselines (``--gpuperf-update``) instead of judging them."""
        return self.sink.records

    def lookup(self, context: TestContext) -> Lookup:
        """The test's baselines as the sink sees them."""
        return Lookup(self.settings, self.baselines, context)

    # -- baselines -----------------------------------------------------------------------
    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The fingerprint (with world size) the test is judged under."""
        return self.baselines.fingerprint(context)

    def entries(self, context: TestContext) -> Entries:
        """All recorded metrics of the test (also when recording: a broken file is never overwritten)."""
        return self.baselines.entries(context)

    def entry(self, context: TestContext, metric_name: str) -> dict[str, Any] | None:
        """The baseline entry of one metric to plan and judge against; None when recording or absent."""
        if not self.sink.plans:
            return None
        entry = self.entries(context).get(metric_name)
        return entry if isinstance(entry, dict) else None

    def stored_entry(self, context: TestContext, metric_name: str) -> dict[str, Any] | None:
        """The entry the baseline file holds, also when recording; None when every entry is rewritten."""
        if not self.sink.reads_stored:
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

    # -- the sink ------------------------------------------------------------------------------
    def judge(self, context: TestContext, metrics: list[Metric]) -> list[Verdict]:
        """The verdicts of one measurement's metrics (judged by the gate, ``recorded`` by the recorder)."""
        return self.sink.verdicts(self.lookup(context), metrics)

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """A suspected time/throughput regression is measured once more before it fails (the gate's call)."""
        return self.sink.wants_confirmation(verdicts)

    def confirm(
        self,
        context: TestContext,
        first: list[Verdict],
        again: dict[str, Metric] | None,
        note: str = "",
        where: str = "a fresh process",
    ) -> list[Verdict]:
        """Re-judge the suspects of ``first`` with the metrics measured ``again`` (None: could not be measured)."""
        return self.sink.confirm(self.lookup(context), first, again, note, where)

    def confirm_stored(
        self, node_id: str, again: dict[str, Metric] | None, note: str = "", where: str = "a fresh process"
    ) -> None:
        """:meth:`confirm` the stored verdicts of a test (after its body ran) with a fresh process's metrics."""
        context = self.contexts.get(node_id)
        if context is not None and suspects(self.verdicts.get(node_id, [])):
            self.verdicts[node_id] = self.confirm(context, self.verdicts[node_id], again, note, where)

    def second_look(self, node_id: str, fresh: FreshRuns, where: str = "a fresh process") -> str | None:
        """After a test's body: the sink's look from fresh processes (a recording's, a confirmation); a warning."""
        context = self.contexts.get(node_id)
        if context is None:
            return None
        verdicts, warning = self.sink.second_look(self.lookup(context), self.verdicts.get(node_id, []), fresh, where)
        self.verdicts[node_id] = verdicts
        return warning

    def store(self, context: TestContext, verdicts: list[Verdict]) -> None:
        """Hand one measurement's verdicts to the sink and keep those it returns for the report.

        The recorder validates them first (a bad value fails this test) and holds their entries until the test
        passed; a rank's collector keeps the metrics for the pytest process and no verdicts.
        """
        kept = self.sink.store(self.lookup(context), verdicts)
        if kept is not None:
            self.contexts[context.node_id] = context
            self.verdicts.setdefault(context.node_id, []).extend(kept)

    def report_instead(self, node_id: str, context: TestContext, verdicts: list[Verdict]) -> None:
        """Report ``verdicts`` for ``node_id`` in place of those stored (a feature's own judgement: A/B)."""
        self.contexts[node_id] = context
        self.verdicts[node_id] = list(verdicts)

    # -- reports -------------------------------------------------------------------------------
    def warnings_for(self, node_id: str) -> list[str]:
        """What the user should see even when the test passes: inconclusive verdicts, tolerances below the noise."""
        lines = []
        for verdict in self.verdicts.get(node_id, []):
            if verdict.status == "inconclusive" and not self.settings.strict:
                lines.append(f"{node_id}: {verdict.message} (passes; --gpuperf-strict fails it)")
            warning = self.sink.warning(verdict, node_id)
            if warning:
                lines.append(f"{node_id}: {warning}")
        return lines

    def failure_lines(self, node_id: str) -> list[str]:
        """Messages of the verdicts that fail ``node_id`` (regressions, changed categories, strict misses)."""
        return self.sink.failure_lines(self.verdicts.get(node_id, []))

    def report_context(self, node_id: str) -> dict[str, Any]:
        """Fingerprint, baseline file and software differences of a judged test, for reports."""
        from pytest_gpuperf.backends.fingerprint import software_differences

        context = self.contexts.get(node_id)
        if context is None:
            return {}
        lookup = self.lookup(context)
        fingerprint = lookup.fingerprint()
        baseline = self.sink.judged_file(lookup)
        return {
            "fingerprint": fingerprint,
            "baseline_file": str(lookup.path()),
            "software_changes": software_differences(baseline.fingerprint, fingerprint) if baseline else [],
        }
