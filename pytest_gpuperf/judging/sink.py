"""Where a test's metrics go once measured: the sink, chosen once per process when the service is built.

The judging service (:mod:`.service`) finds a test's entries and tolerances and keeps its verdicts; what happens
to the metrics is the sink's:

* the gate (:class:`pytest_gpuperf.judging.gate.Gate`, a normal run): judge, confirm a suspect, fail;
* the recorder (:class:`pytest_gpuperf.baselines.recording.Recorder`, under ``--gpuperf-update``): merge the
  processes' measurements, apply the update policy, write the passed tests' entries;
* the collector (:class:`pytest_gpuperf.judging.collecting.Collector`, inside a rank): hand the metrics back to
  the pytest process, which judges the world once.

A sink sees one test through a :class:`Lookup` (its context, entries, fingerprint and the run's settings), never
the service's fields.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.judging import tolerances
from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Metric, Verdict

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.judging.sources import BaselineSource, Entries, StoredFile
    from pytest_gpuperf.settings import Settings

#: ``fresh(n)``: the metrics of ``n`` fresh runs of the test (by metric name) and, when fewer came back, why.
FreshRuns = Callable[[int], tuple[list[dict[str, Metric]], str]]


class Lookup:
    """One test's baselines as a sink sees them, read on demand (the file only when a sink asks)."""

    def __init__(self, settings: Settings, source: BaselineSource, context: TestContext) -> None:
        self.settings = settings
        self.source = source
        self.context = context
        self._entries: Entries | None = None

    @property
    def node_id(self) -> str:
        """The test's id."""
        return self.context.node_id

    def entries(self) -> Entries:
        """The test's recorded metrics (read once)."""
        if self._entries is None:
            self._entries = self.source.entries(self.context)
        return self._entries

    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint (with world size) the test is judged and recorded under."""
        return self.source.fingerprint(self.context)

    def path(self) -> Path:
        """The baseline file of the test's fingerprint."""
        return self.source.path(self.context)

    def file(self) -> StoredFile | None:
        """The whole baseline file of the test's fingerprint (None when absent or not known here)."""
        return self.source.file(self.context)

    def where(self) -> str:
        """The fingerprint in words, for verdict messages."""
        from pytest_gpuperf.backends.fingerprint import describe

        return describe(self.fingerprint())

    def prepare(self, metrics: list[Metric]) -> None:
        """Give each metric its tolerance, its informational mark and its step's bound class (read by the rules)."""
        informational = tolerances.informational(self.context)
        _note_bounds(metrics, self.entries())
        for metric in metrics:
            if metric.name in informational or metric.name.rpartition(".")[2] in informational:
                metric.judged = False  # recorded and shown, never failing (see tolerances.informational)
            metric.tolerance = tolerances.metric_tolerance(self.settings, self.context, metric)


class Sink:
    """What a run does with a test's metrics; the defaults are those of a sink that neither judges nor records."""

    #: Whether this run records baselines instead of judging them (what the reports say about the run).
    records = False
    #: Whether a measurement plans against the stored entry of its judged metric (its timing method, stop rule).
    plans = True
    #: Whether the stored entries are read for what a re-record keeps (a class near its boundary stays put).
    reads_stored = True

    def verdicts(self, lookup: Lookup, metrics: list[Metric]) -> list[Verdict]:
        """The verdicts of one measurement's metrics."""
        return [Verdict(metric, "info") for metric in metrics]

    def wants_confirmation(self, verdicts: list[Verdict]) -> bool:
        """Whether a suspect among ``verdicts`` is measured once more before it fails."""
        return False

    def confirm(
        self, lookup: Lookup, first: list[Verdict], again: dict[str, Metric] | None, note: str, where: str
    ) -> list[Verdict]:
        """``first`` re-judged with the metrics measured ``again`` (None: could not be measured)."""
        return first

    def store(self, lookup: Lookup, verdicts: list[Verdict]) -> list[Verdict] | None:
        """Take one measurement's verdicts; return those the service keeps for the report (None: none)."""
        return verdicts

    def second_look(
        self, lookup: Lookup, verdicts: list[Verdict], fresh: FreshRuns, where: str
    ) -> tuple[list[Verdict], str | None]:
        """After the test's body: its verdicts with fresh processes' measurements, and a warning or None."""
        return verdicts, None

    def warning(self, verdict: Verdict, node_id: str) -> str | None:
        """What the user should see about a verdict even when the test passes, or None."""
        return None

    def failure_lines(self, verdicts: list[Verdict]) -> list[str]:
        """Messages of the verdicts that fail the test."""
        return [v.message for v in verdicts if v.failed]

    def judged_file(self, lookup: Lookup) -> StoredFile | None:
        """The baseline file the test was judged against, for the report's software differences (None: none)."""
        return None


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
