"""The stages after the plan and the probes: time -> metrics -> count -> sink.

Each stage takes the values before it and returns its own: the time stage a finished
:class:`~pytest_gpuperf.timing.TimingResult`, the metrics stage the step's metrics, the count stage the metrics the
features add (``pytest_gpuperf_after_measure``), the sink the verdicts it stored. The sink is the judging service,
used through its methods ``judge``, ``wants_confirmation``, ``confirm`` and ``store``: a suspected slowdown is
judged again with this moment's host calibration and, unless a fresh process confirms it after the test body, timed
again here with the same plan (:meth:`Stages.retime`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_gpuperf.judging.agreement import IN_PROCESS
from pytest_gpuperf.judging.clock_facts import CLOCK
from pytest_gpuperf.results import KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import AfterMeasure
    from pytest_gpuperf.judging.service import Judging
    from pytest_gpuperf.measuring.plan import MeasurePlan
    from pytest_gpuperf.measuring.probes import Probes
    from pytest_gpuperf.results import Verdict
    from pytest_gpuperf.timing import TimingResult
    from pytest_gpuperf.timing.calibration import Calibration


@dataclass(frozen=True)
class Stages:
    """The stages of one ``measure()`` call of ``step`` in the test ``context``."""

    context: TestContext
    judging: Judging
    step: Callable[[], object]
    #: The count hooks (None: no feature adds metrics).
    after_measure: AfterMeasure | None = None

    def probe(self, plan: MeasurePlan) -> Probes:
        """The probe stage (:mod:`.probes`): the step's extra calls, each once."""
        from pytest_gpuperf.measuring.probes import probe

        return probe(self.context.backend, self.step, plan.call.memory)

    def time(self, plan: MeasurePlan, probes: Probes) -> TimingResult:
        """The time stage: the timing loop with the plan's settings and stop rule, the probes' sync count held; on
        the host CPU under xdist, one worker of the run at a time (:mod:`pytest_gpuperf.procs.cpu_lock`)."""
        from pytest_gpuperf.procs.cpu_lock import serialised
        from pytest_gpuperf.timing import measure_time

        backend = self.context.backend
        with probes.held_for(self.step), serialised(backend.is_host_cpu()):
            return measure_time(backend, self.step, plan.config, plan.stop_rule)

    def metrics(self, plan: MeasurePlan, timing: TimingResult, probes: Probes) -> list[Metric]:
        """The metrics stage: the timing metrics (calibrated), then host syncs, peak memory and the kernel signature
        from the probes."""
        from pytest_gpuperf.timing.metrics import host_sync_metrics

        metrics = self.timed(plan, timing) + host_sync_metrics(plan.call.name, probes.host_syncs)
        if probes.peak_memory is not None:
            note = {"note": probes.memory_note}
            peak = Metric(f"{plan.call.name}.peak_memory", probes.peak_memory, "B", "lower", KIND_MEMORY, extra=note)
            metrics.append(peak)
        if probes.kernels is not None:
            metrics.append(probes.kernels.metric(plan.call.name))
        return metrics

    @staticmethod
    def timed(plan: MeasurePlan, timing: TimingResult) -> list[Metric]:
        """The metrics of one timing of the step (the plan's judged one marked), with the plan's calibration."""
        from pytest_gpuperf.timing.metrics import timing_metrics

        call = plan.call
        metrics = timing_metrics(call.name, timing, call.items, call.unit, call.flops, call.bytes_moved, plan.judged)
        return with_calibration(metrics, plan.calibration)

    def count(self, plan: MeasurePlan, timing: TimingResult, metrics: list[Metric]) -> list[Metric]:
        """The count stage: the metrics every ``pytest_gpuperf_after_measure`` hook adds."""
        if self.after_measure is None:
            return []
        from pytest_gpuperf.extensions import MeasureContext

        call = plan.call
        measured = MeasureContext(self.context, self.step, call.name, timing, list(metrics), self.judging, call.hints())
        return list(self.after_measure(measured))

    def sink(self, plan: MeasurePlan, probes: Probes, metrics: list[Metric], confirm_here: bool) -> list[Verdict]:
        """Judge ``metrics``; confirm a suspect here when ``confirm_here`` and the service asks; store the verdicts."""
        from pytest_gpuperf.judging.service import suspects

        verdicts = self.judging.judge(self.context, metrics)
        if suspects(verdicts) and plan.calibration is not None:
            plan, changed = recalibrated(plan, metrics)
            if changed:  # a suspect judged with this moment's calibration
                verdicts = self.judging.judge(self.context, metrics)
        # A clock band that straddled is decided by a fresh process's agreement, never by a second measurement here.
        if confirm_here and self.judging.wants_confirmation([v for v in verdicts if v.doubt != CLOCK]):
            again = self.retime(plan, probes)
            verdicts = self.judging.confirm(self.context, verdicts, again, where=IN_PROCESS)
        self.judging.store(self.context, verdicts)
        return verdicts

    def retime(self, plan: MeasurePlan, probes: Probes) -> dict[str, Metric]:
        """A confirmation in this process: the time stage again with the same plan, its timing metrics by name."""
        return {m.name: m for m in self.timed(plan, self.time(plan, probes))}


def with_calibration(metrics: list[Metric], calibration: Calibration | None) -> list[Metric]:
    """``metrics`` whose timing entries carry the host calibration under the clock they were timed with."""
    if calibration is not None:
        for metric in metrics:
            if metric.kind in (KIND_TIME, KIND_THROUGHPUT):
                metric.extra.update(calibration.facts(str(metric.extra.get("method", ""))))
    return metrics


#: Share of the recalibration's own CPU time that other threads of this process may use at the same time: more, and
#: the test's own threads (a thread it leaked, a data loader) were competing with the calibration kernel.
OWN_THREADS_LIMIT = 0.25
#: A calibration that took less CPU than this (a pinned or injected one) measured nothing other threads could slow;
#: comparing two such tiny CPU times would be noise.
MEASURED_CPU_SECONDS = 0.005


def recalibrated(plan: MeasurePlan, metrics: list[Metric]) -> tuple[MeasurePlan, bool]:
    """Before a suspected slowdown is confirmed: the host calibration measured again (the machine's speed state may
    have moved since the process started) and put on ``metrics``; the plan with it, and whether it changed facts.

    The calibration kernel is fixed, so the suspect's own regression cannot slow it through the kernel: on an
    unchanged machine the verdict stands; in a slower state the time verdicts become inconclusive (another machine
    state). But the test runs in this process, and a regression that leaves a thread spinning slows the kernel from
    beside it: when other threads of this process used more than :data:`OWN_THREADS_LIMIT` of the calibration's CPU
    time, the new calibration measured the test, not the machine, and is not used. It is never kept for the session
    either: a later, innocent test is judged with the process's own start-up calibration.
    """
    import time

    from pytest_gpuperf.timing.calibration import host_calibration

    process, thread = time.process_time(), time.thread_time()
    fresh = host_calibration()
    own = time.thread_time() - thread
    others = (time.process_time() - process) - own
    if own >= MEASURED_CPU_SECONDS and others > OWN_THREADS_LIMIT * own:
        return plan, False
    changed = False
    for metric in metrics:
        if "calibration" in metric.extra:
            facts = fresh.facts(str(metric.extra.get("method", "")))
            changed = changed or facts != {k: metric.extra.get(k) for k in facts}
            metric.extra.update(facts)
    return plan.recalibrated(fresh), changed
