"""Evidence from several processes: baselines recorded over N fresh processes, regressions confirmed in a fresh one.

Whole processes are fast or slow (memory layout, allocator state, autotuning): the same step's judged quantile
can differ several-fold between fresh processes of one machine. So

* ``--gpuperf-update`` with ``gpuperf_processes = N`` measures the test in this process and in N-1
  fresh ones, stores the median process's numbers and the **spread between processes**
  (``process_spread``), and the **minimum detectable change** (:func:`~pytest_gpuperf.stats.min_detectable_change`);
* a suspected time regression is measured again in a fresh process before it fails the test: a
  confirmation that disagrees makes the verdict inconclusive (:mod:`pytest_gpuperf.judging.evidence`).

The processes themselves come from the ``pytest_gpuperf_run_in_fresh_processes`` hook (the distributed
feature's worker pool); these functions only combine what they measured.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from pytest_gpuperf.judging.sink import FreshRuns
from pytest_gpuperf.results import KIND_HOST, KIND_THROUGHPUT, KIND_TIME, Metric, Verdict
from pytest_gpuperf.stats import log_sigma, min_detectable_change, noise_bound, process_spread
from pytest_gpuperf.units import format_change
from pytest_gpuperf.validate import number_or_none

#: Default processes per baseline under ``--gpuperf-update`` (``gpuperf_processes = 0``): host CPUs vary per process,
#: and so does a power-capped GPU (its SM clock under the cap depends on its temperature), so a baseline from one
#: process can sit at either end of that range.
CPU_PROCESSES = 3
DEVICE_PROCESSES = 1


#: A timing tolerance below this is a tight gate: its baseline needs the spread between processes known, since a
#: device step's time can sit a few percent apart in two processes (the GPU's thermal state, its allocations).
TIGHT_TOLERANCE = 0.05


def default_processes(host_cpu: bool, power_capped: bool = False, tight: bool = False) -> int:
    """Processes a baseline is recorded from when the user did not say: 3 on a host CPU, a GPU that ran the step at
    its power cap, or a tight gate (``tight``: a timing tolerance under :data:`TIGHT_TOLERANCE`), else 1."""
    return CPU_PROCESSES if host_cpu or power_capped or tight else DEVICE_PROCESSES


def is_timing(metric: Metric) -> bool:
    """True for the numeric time/throughput metrics whose process-to-process noise is modelled."""
    return metric.kind in (KIND_TIME, KIND_THROUGHPUT) and isinstance(metric.value, (int, float))


def spread_recorded(metric: Metric) -> bool:
    """True for the metrics a recording stores from its median process with the spread between processes: the
    timings (:func:`is_timing`) and a CUDA step's host overhead, whose gains are judged against that spread
    (:mod:`pytest_gpuperf.judging.gains`), so that a fast process is neither stored nor reported as a gain."""
    return is_timing(metric) or (metric.kind == KIND_HOST and isinstance(metric.value, (int, float)))


def noise_facts(values: list[float], precision: float, tolerance: float) -> dict[str, float | int]:
    """``process_spread``, ``processes``, ``min_detectable_change`` and ``noise_bound`` of one metric."""
    sigma = log_sigma(values, precision)
    processes = max(1, len(values))
    return {
        "processes": processes,
        "process_spread": round(process_spread(values), 4),
        "min_detectable_change": round(min_detectable_change(sigma, tolerance, processes), 4),
        "noise_bound": round(noise_bound(sigma, processes), 4),
    }


def combine(main: Metric, others: list[Metric], tolerance: float, include_main: bool = True) -> Metric:
    """The metric a baseline stores from several processes: the median process's numbers plus the noise facts.

    ``include_main`` False leaves this process's own measurement out (it ran in another speed state of the host,
    :func:`same_state`); the stored metric then comes from the others alone.
    """
    timed = [m for m in others if spread_recorded(m)]
    every = [main, *timed] if include_main or not timed else timed
    ordered = sorted(every, key=lambda m: float(m.value))
    chosen = ordered[(len(ordered) - 1) // 2]
    values = [float(m.value) for m in every]
    precision = chosen.extra.get("precision")
    facts = noise_facts(values, float(precision) if isinstance(precision, (int, float)) else 0.0, tolerance)
    extra = {**chosen.extra, **facts, "process_values": ",".join(f"{v:.6g}" for v in values)}
    between = calibration_spread(every)
    if between is not None:  # the same machine's calibration moved this much between the recording's processes
        extra["calibration_spread"] = round(max(between, float(chosen.extra.get("calibration_spread") or 0.0)), 3)
    return replace(chosen, samples=list(chosen.samples), judged=main.judged, tolerance=main.tolerance, extra=extra)


def calibration_spread(metrics: list[Metric]) -> float | None:
    """How far the host calibration moved between the processes of one recording (``max / min - 1``), or None.

    A virtual machine's speed states move it between fresh processes of one machine, so a recording that saw it
    move stores that as the band a later run on the same machine may show.
    """
    values = [float(v) for m in metrics if isinstance(v := m.extra.get("calibration"), (int, float)) and v > 0]
    return process_spread(values) if len(values) >= 2 else None


def tolerance_warning(metric: Metric, node_id: str = "") -> str | None:
    """At record time: a warning when the metric's tolerance is tighter than its recorded noise supports, else None.

    A spread between processes wider than the tolerance makes every later verdict of the entry inconclusive
    (:func:`pytest_gpuperf.judging.evidence.spread_rule`): the warning says so and names both fixes. A kept entry
    (the file keeps its stored numbers) and an informational metric warn about nothing.
    """
    from pytest_gpuperf.judging.evidence import spread_fix

    bound, tolerance = metric.extra.get("noise_bound"), metric.tolerance
    if not metric.judged or metric.extra.get("baseline_kept") or not isinstance(tolerance, (int, float)):
        return None
    if not is_timing(metric):
        return None  # a host overhead's spread only narrows its gains (judging.gains), it never excuses a slowdown
    spread = metric.extra.get("process_spread", 0.0)
    processes = metric.extra.get("processes", 1)
    if isinstance(spread, (int, float)) and spread > tolerance:
        return (
            f"{metric.name}: recorded from {processes} processes whose results spread {spread:.0%}, wider than its "
            f"{tolerance:.0%} tolerance, so later runs of this test are inconclusive (they fail under "
            f"--gpuperf-strict); "
            + spread_fix(spread, tolerance, node_id, "its", "on this machine", number_or_none(processes))
        )
    if not isinstance(bound, (int, float)) or bound <= tolerance:
        return None
    mdc = metric.extra.get("min_detectable_change", 0.0)
    return (
        f"{metric.name}: tolerance {tolerance:.0%} is tighter than the noise supports here (spread between "
        f"{processes} processes {spread:.0%}; unchanged code reaches +{bound:.0%} in 1 run "
        f"of 20; the smallest slowdown caught with 95% power is {mdc:.0%}): raise time_tolerance to about "
        f"{bound:.0%} or run on a quieter runner"
    )


def reconcile(
    first: Verdict,
    confirmation: Verdict | None,
    note: str = "",
    where: str = "a fresh process",
    node_id: str = "",
    entry: dict[str, Any] | None = None,
) -> Verdict:
    """The verdict after a confirmation: agreeing keeps it, disagreeing makes it inconclusive.

    Where neither reading alone decided (the confirmation's own status differs, or the first's clock band
    straddled), two fresh processes that both read the change past the tolerance decide together
    (:func:`pytest_gpuperf.judging.agreement.agreed`, which reads ``entry``'s spread between processes).
    """
    from pytest_gpuperf.judging.agreement import agreed, apart
    from pytest_gpuperf.judging.clock_facts import CLOCK
    from pytest_gpuperf.judging.evidence import conditions_reason

    if confirmation is None:
        why = f" ({note})" if note else ""
        return replace(first, message=f"{first.message}; not confirmed in {where}{why}")
    suspected = first.suspected or first.status
    change = format_change(confirmation.ratio) if isinstance(confirmation.ratio, (int, float)) else "?"
    if confirmation.status != suspected or first.doubt == CLOCK:
        return agreed(first, confirmation, entry, where, node_id) or apart(first, confirmation, where, node_id)
    if first.status == "inconclusive":  # the first run's conditions were doubtful: the confirmation must be clean
        doubt = conditions_reason(confirmation.metric.extra)
        if doubt:
            return replace(first, message=f"{first.message}; {where} measured {change} but {doubt}")
        return replace(
            confirmation,
            message=f"{confirmation.message}; confirmed in {where} after a doubtful first run ({first.message})",
        )
    return replace(first, message=f"{first.message}; confirmed in {where} ({change})")


#: Fresh processes a suspected host-CPU regression is confirmed in: all must agree. Whole processes of one host land
#: in a fast or a slow state, and a confirmation in one more process agrees with a slow first one as often as that
#: state comes up; a slowdown of the code slows the fastest of the three as well.
HOST_CONFIRMATIONS = 2


def confirmations(suspected: list[Verdict]) -> int:
    """Fresh processes that confirm ``suspected``: :data:`HOST_CONFIRMATIONS` when one is a host-CPU timing (it
    carries a host calibration), else 1."""
    host = any(number_or_none(v.metric.extra.get("calibration")) for v in suspected)
    return HOST_CONFIRMATIONS if host else 1


def can_replicate(item: Any) -> bool:
    """True when a fresh process can run this test again (a feature implements the hook; module-level, local)."""
    hook = item.config.hook.pytest_gpuperf_run_in_fresh_processes
    if item.config.getoption("gpuperf_ab", default=None):
        return False  # an A/B run judges its own paired worker processes
    return (
        bool(hook.get_hookimpls())
        and item.get_closest_marker("gpuperf_distributed") is None
        and "gpuperf_torchrun" not in getattr(item, "fixturenames", ())  # each script run is fresh processes already
    )


#: Fresh processes one recording may start to replace those whose host calibration read another speed state.
MAX_REPLACED = 2


def _calibrated(metrics: Any) -> Metric | None:
    """The first timing metric that carries a host calibration, or None."""
    return next((m for m in metrics if is_timing(m) and (number_or_none(m.extra.get("calibration")) or 0) > 0), None)


def _off(metric: Metric | None, reference: float) -> bool:
    """A process's calibration past the machine band around ``reference`` (another speed state of the host)."""
    from pytest_gpuperf.judging.machine_rule import machine_change

    return metric is not None and machine_change(metric.extra, {"calibration": reference}, metric.tolerance) is not None


def same_state(
    main: list[Metric], runs: list[dict[str, Metric]], fresh: FreshRuns
) -> tuple[list[dict[str, Metric]], bool, int]:
    """A recording's processes in one speed state of the host: (runs, this process left out, processes replaced).

    A process whose calibration differs from the median process's by more than the machine band
    (:func:`~pytest_gpuperf.judging.machine_rule.band`) ran in another speed state of the machine: its time would
    make the recorded spread one that gates nothing, and a later run in the usual state would re-record it. Such a
    fresh process is replaced by another, this process's own measurement left out, at most :data:`MAX_REPLACED`
    times; past that the spread records both.
    """
    from pytest_gpuperf.stats import median

    own = _calibrated(main)
    if own is None:
        return runs, False, 0
    main_off, replaced = False, 0
    while True:
        facts = [_calibrated(run.values()) for run in runs]
        known = [f for f in facts if f is not None] + ([] if main_off else [own])
        if len(known) < 2:
            return runs, main_off, replaced
        reference = median([float(f.extra["calibration"]) for f in known])
        bad = [i for i, fact in enumerate(facts) if _off(fact, reference)]
        leave_main = not main_off and _off(own, reference)
        count = len(bad) + int(leave_main)
        if not count or replaced + count > MAX_REPLACED:
            return runs, main_off, replaced
        more, _why = fresh(count)
        runs = [run for i, run in enumerate(runs) if i not in bad] + more
        main_off, replaced = main_off or leave_main, replaced + count


class Looks(Protocol):
    """What :func:`second_look` asks of the judging service (:class:`~pytest_gpuperf.judging.service.Judging`)."""

    def second_look(self, node_id: str, fresh: FreshRuns, where: str = "a fresh process") -> str | None:
        """The sink's look from fresh processes at the test's stored verdicts; a warning or None."""
        ...


def second_look(judging: Looks, node_id: str, fresh: FreshRuns, where: str = "a fresh process") -> str | None:
    """After a test's first measurement: record it from more processes, or confirm a suspected regression.

    The run's sink decides which: under ``--gpuperf-update`` the recorder stores the baseline from
    ``gpuperf_processes`` runs in one speed state of the host (:func:`same_state`), the spread between them;
    otherwise the gate measures a suspected time/throughput regression once more, and a run that disagrees makes
    the verdict inconclusive (:func:`reconcile`). Returns a warning when fewer processes than asked finished the
    test or some were left out, else None. ``fresh`` runs the test again (a replica process, or the script of a
    ``gpuperf_torchrun`` test once more).
    """
    return judging.second_look(node_id, fresh, where)
