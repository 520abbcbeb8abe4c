"""The recorder: the sink of a ``--gpuperf-update`` run (merge the processes, apply the policy, write).

Chosen once, when the session builds its judging service (:func:`choose_sink`). Each test's metrics become
``recorded`` verdicts (``info`` for informational ones); their entries are validated and held per test by the
:class:`~pytest_gpuperf.baselines.update.BaselineUpdater`, which the recorder owns: it decides what each entry
keeps (:mod:`.policy`), commits the entries of tests that passed and writes them at the end. A baseline is
recorded from ``gpuperf_processes`` processes (:meth:`Recorder.second_look`), the median process's numbers and
the spread between them stored (:mod:`pytest_gpuperf.judging.replication`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytest_gpuperf.baselines.update import BaselineUpdater, Entries
from pytest_gpuperf.judging.gate import Gate
from pytest_gpuperf.judging.replication import (
    TIGHT_TOLERANCE,
    combine,
    default_processes,
    is_timing,
    noise_facts,
    same_state,
    spread_recorded,
)
from pytest_gpuperf.judging.sink import FreshRuns, Lookup, Sink
from pytest_gpuperf.results import Metric, Verdict

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.baselines.schema import BaselineFile
    from pytest_gpuperf.settings import Settings

#: The name the recorder's updater is registered under (its hooks commit and write the entries).
UPDATER_NAME = "gpuperf-baseline-updater"


def choose_sink(config: pytest.Config, settings: Settings) -> Sink:
    """The run's sink, chosen once at configure: the recorder under ``--gpuperf-update``, else the gate."""
    if not settings.update:
        return Gate(settings)
    from pytest_gpuperf.settings import get_option

    recorder = Recorder(
        settings.processes, get_option(config, "gpuperf_update_all"), get_option(config, "--gpuperf-accept-slower")
    )
    config.pluginmanager.register(recorder.updater, UPDATER_NAME)
    return recorder


class Recorder(Sink):
    """Record, never judge: ``processes`` per baseline (0: the backend's default), every entry rewritten under
    ``update_all``, a slower time/throughput written only under ``accept_slower``."""

    records = True
    plans = False  # a recording measures afresh, not the way the stored entry was timed

    def __init__(self, processes: int = 0, update_all: bool = False, accept_slower: bool = False) -> None:
        self.processes = processes
        self.updater = BaselineUpdater(update_all=update_all, accept_slower=accept_slower)

    @property
    def reads_stored(self) -> bool:  # type: ignore[override]
        """The stored entries count for what a re-record keeps, except when every entry is rewritten."""
        return not self.updater.update_all

    def verdicts(self, lookup: Lookup, metrics: list[Metric]) -> list[Verdict]:
        """``recorded`` (``info`` for an informational metric), each with its tolerance."""
        lookup.prepare(metrics)
        return [Verdict(m, "recorded" if m.judged else "info", tolerance=m.tolerance) for m in metrics]

    def store(self, lookup: Lookup, verdicts: list[Verdict]) -> list[Verdict]:
        """Validate and hold the entries (a bad value raises ``ValueError`` and fails this test)."""
        for verdict in verdicts:
            _note_single_process(verdict)  # the noise facts its entry stores (replaced by N processes' ones)
        self._hold(lookup, verdicts)
        return verdicts

    def second_look(
        self, lookup: Lookup, verdicts: list[Verdict], fresh: FreshRuns, where: str
    ) -> tuple[list[Verdict], str | None]:
        """The baseline from ``processes`` runs in one speed state of the host, the spread between them stored.

        3 processes on a host CPU, a GPU at its power cap or under a tight gate unless asked
        (:func:`default_processes`); a process in another speed state is replaced (:func:`same_state`). Warns when
        fewer finished or some were left out.
        """
        node_id = lookup.node_id
        capped = any(v.metric.extra.get("power_capped") for v in verdicts)
        tight = any(is_timing(v.metric) and (v.tolerance or 1.0) < TIGHT_TOLERANCE for v in verdicts)
        wanted = self.processes or default_processes(lookup.context.backend.is_host_cpu(), capped, tight)
        if wanted <= 1:
            return verdicts, None
        runs, note = fresh(wanted - 1)
        runs, main_off, replaced = same_state([v.metric for v in verdicts], runs, fresh)
        merged = self.merge(lookup, verdicts, runs, include_main=not main_off)
        recorded = len(runs) + (0 if main_off else 1)
        if recorded < wanted:
            why = f": {note}" if note else ""
            return merged, (
                f"{node_id}: baseline recorded from {recorded} of {wanted} processes; "
                f"{wanted - recorded} fresh process(es) did not finish the test{why}"
            )
        if replaced:
            return merged, (
                f"{node_id}: {replaced} recording process(es) left out, the host calibration there read another "
                "speed state of this machine"
            )
        return merged, None

    def merge(
        self, lookup: Lookup, verdicts: list[Verdict], runs: list[dict[str, Metric]], include_main: bool = True
    ) -> list[Verdict]:
        """Each timing metric and host overhead from this and the fresh processes' measurements, the median
        process's (``include_main`` False: from the fresh ones alone), held again; the test's verdicts with the
        merged metrics."""
        merged, timing = [], []
        for verdict in verdicts:
            metric = verdict.metric
            if spread_recorded(metric) and any(metric.name in run for run in runs):  # others' merged facts kept
                others = [run[metric.name] for run in runs if metric.name in run]
                metric = combine(metric, others, verdict.tolerance or 0, include_main)
            merged.append(Verdict(metric, verdict.status, tolerance=verdict.tolerance))
            if metric is not verdict.metric:
                timing.append(merged[-1])
        if timing:
            self._hold(lookup, timing)
        return merged

    def warning(self, verdict: Verdict, node_id: str) -> str | None:
        """A tolerance tighter than the recorded noise supports."""
        from pytest_gpuperf.judging.replication import tolerance_warning

        return tolerance_warning(verdict.metric, node_id)

    def pending(self) -> dict[Path, tuple[dict[str, Any], Entries]]:
        """What this recorder would write: file -> (fingerprint, test id -> entries), held tests included."""
        out = {path: (fingerprint, dict(tests)) for path, (fingerprint, tests) in self.updater.committed.items()}
        for node_id, held in self.updater.held.items():
            out.setdefault(held.path, (held.fingerprint, {}))[1][node_id] = held.entries
        return out

    def _hold(self, lookup: Lookup, verdicts: list[Verdict]) -> None:
        """Hand ``verdicts``' entries to the updater (validated, kept when within tolerance)."""
        baseline = cast("BaselineFile | None", lookup.file())  # a file-backed source gives the whole file
        self.updater.hold(lookup.node_id, lookup.path(), lookup.fingerprint(), verdicts, baseline, lookup.where())


def _note_single_process(verdict: Verdict) -> None:
    """A recorded timing metric's noise facts from its own process (replaced when fresh processes add theirs)."""
    metric = verdict.metric
    if spread_recorded(metric) and "processes" not in metric.extra:
        precision = metric.extra.get("precision")
        within = float(precision) if isinstance(precision, (int, float)) else 0.0
        metric.extra.update(noise_facts([float(metric.value)], within, verdict.tolerance or 0.0))
