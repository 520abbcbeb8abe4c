"""What ``--gpuperf-update`` writes: reviewable baselines from tests that passed.

* An entry is rewritten only when its metric moved past its tolerance (judged
  the way a normal run judges it), when how it was measured changed (unit, kind,
  direction, timing method) or when it is new; otherwise the stored
  entry is kept byte for byte. So re-recording unchanged code gives a 0-line diff
  and an optimised test changes only the metrics that moved.
  ``--gpuperf-update-all`` rewrites every entry of the tests that ran.
* A step's timing family (``time``, ``throughput`` and the rates derived from the
  time) is kept or rewritten together, decided by the judged member: the stored
  throughput samples are derived from the time samples on reading.
* Entries are held per test and committed only when the test's call phase
  passed: a fast but wrong implementation never becomes the reference.
* Every entry is validated when it is held, so a bad number fails its own test
  and the file never receives an entry the reader refuses.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.schema import BaselineFile
    from pytest_gpuperf.results import Metric, Verdict

#: Metrics computed from a step's time (so kept or rewritten with it), by the last part of their name.
TIMING_DERIVED = ("flop_rate", "bandwidth", "roof_share", "roof_fraction", "cycles", "host_overhead")
#: Fields that say how a metric was measured: a change rewrites the entry whatever the values.
IDENTITY_FIELDS = ("unit", "better", "kind", "method")
_TIMING_KINDS = ("time", "throughput")
#: Kinds whose entries keep their measurement facts (how they were timed, the clocks, the noise).
_FACT_KINDS = ("time", "throughput", "cycles", "host")
#: Numbers about a timing measurement its entry keeps (read by :mod:`pytest_gpuperf.judging.evidence`).
MEASUREMENT_FACTS = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "processes",
    "process_spread",
    "min_detectable_change",
    "noise_bound",
    "eager_time",
)

Entries = dict[str, dict[str, dict[str, Any]]]


def metric_to_entry(metric: Metric) -> dict[str, Any]:
    """The baseline-file entry for one metric (samples thinned to evenly spaced order statistics)."""
    from pytest_gpuperf.stats import spread_subset

    entry: dict[str, Any] = {"value": metric.value, "unit": metric.unit, "better": metric.better, "kind": metric.kind}
    if metric.samples:
        entry["samples"] = spread_subset(list(metric.samples))
    if metric.kind in _FACT_KINDS:
        if metric.extra.get("method"):
            entry["method"] = metric.extra["method"]  # how it was timed, so later runs time it the same way
        for key in MEASUREMENT_FACTS:  # the machine state and the noise between processes (judging's evidence)
            value = metric.extra.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                entry[key] = value
    return entry


def _derivable(throughput: Metric, time: Metric) -> bool:
    """True when the throughput samples are ``items / time`` sample by sample (stored once, as times)."""
    if not throughput.samples or len(throughput.samples) != len(time.samples):
        return False
    try:
        items = float(throughput.value) * float(time.value)
        return items > 0 and all(
            abs(float(r) * float(t) / items - 1.0) < 1e-6 for r, t in zip(throughput.samples, time.samples, strict=True)
        )
    except (TypeError, ValueError, ZeroDivisionError):
        return False


def entries_for(metrics: list[Metric]) -> dict[str, dict[str, Any]]:
    """Entries of one batch of metrics; a throughput derivable from its time sibling stores no samples."""
    by_name = {m.name: m for m in metrics}
    out = {}
    for metric in metrics:
        entry = metric_to_entry(metric)
        time = by_name.get(metric.name.rpartition(".")[0] + ".time")
        if metric.kind == "throughput" and time is not None and time.kind == "time" and _derivable(metric, time):
            entry.pop("samples", None)
        out[metric.name] = entry
    return out


def _moved(metric: Metric, old: dict[str, Any], where: str) -> Verdict | None:
    """The judged verdict when ``metric`` stayed within its tolerance of ``old``; None when it moved."""
    from pytest_gpuperf.judging.compare import judge

    tolerance = metric.tolerance if metric.tolerance is not None else 0.05
    verdict = judge(dataclasses.replace(metric, judged=True), old, tolerance, where)
    return None if verdict.status in ("regression", "improvement", "changed") else verdict


def _same_identity(new: dict[str, Any], old: dict[str, Any]) -> bool:
    return all(new.get(key) == old.get(key) for key in IDENTITY_FIELDS)


def _families(metrics: list[Metric]) -> dict[str, list[Metric]]:
    """Metrics grouped so that each group is kept or rewritten as one (timing families, else one metric each)."""
    names = {m.name for m in metrics}
    groups: dict[str, list[Metric]] = {}
    for metric in metrics:
        prefix, _, last = metric.name.rpartition(".")
        timed = f"{prefix}.time" in names and (metric.kind in _TIMING_KINDS or last in TIMING_DERIVED)
        groups.setdefault(f"{prefix}.time" if timed else metric.name, []).append(metric)
    return groups


def decide(
    metrics: list[Metric], old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], where: str
) -> dict[str, Verdict]:
    """The metrics whose stored entry is kept, each with the verdict that kept it (judged against ``old``)."""
    kept: dict[str, Verdict] = {}
    for group in _families(metrics).values():
        deciding = [m for m in group if m.kind in _TIMING_KINDS and m.judged] or [
            m for m in group if m.kind in _TIMING_KINDS
        ]
        deciding = deciding or group
        # Only the deciding metrics' identity matters: an informational rate of the family whose form changed
        # (a roof share over 100% stored as the word "counting error") keeps its entry while the timing is kept.
        if any(m.name not in old or not _same_identity(new[m.name], old[m.name]) for m in deciding):
            continue
        verdicts = {m.name: _moved(m, old[m.name], where) for m in deciding}
        if any(v is None for v in verdicts.values()):
            continue
        for metric in group:
            if metric.name not in old:
                continue  # a metric the baseline never had is written
            verdict = verdicts.get(metric.name)
            if verdict is None:
                from pytest_gpuperf.results import Verdict as VerdictType

                verdict = VerdictType(metric, "unchanged", baseline=old[metric.name].get("value"))
            kept[metric.name] = verdict
    return kept


def _stored_key(node_id: str, backend: str, baseline: BaselineFile | None) -> str:
    """The key of the test's entries in ``baseline``: its id, or the older backend-first id they were recorded under."""
    from pytest_gpuperf.backends.selection import backend_first_id

    if baseline is None or node_id in baseline.stored:
        return node_id
    legacy = backend_first_id(node_id, backend)
    return legacy if legacy and legacy in baseline.stored else node_id


@dataclasses.dataclass
class HeldTest:
    """The entries one test produced, waiting for its call phase to pass."""

    path: Path
    fingerprint: dict[str, Any]
    entries: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    kept: set[str] = dataclasses.field(default_factory=set)
    had_entry: bool = False
    #: The key the test's entries had when recorded under an older id (backend first); removed on commit.
    replaces: str | None = None


class BaselineUpdater:
    """Holds ``--gpuperf-update`` entries per test, commits those of passed tests, writes them at the end.

    ``committed`` is the judging service's ``pending_updates`` (path -> (fingerprint, test id -> entries));
    a feature can veto writing them with the ``pytest_gpuperf_write_baselines`` hook.
    """

    def __init__(self, committed: dict[Path, tuple[dict[str, Any], Entries]], update_all: bool = False) -> None:
        self.committed = committed
        self.update_all = update_all
        self.held: dict[str, HeldTest] = {}
        self.not_recorded: list[str] = []
        self.written: dict[str, dict[str, int]] = {}
        self.unchanged_files: list[str] = []
        self.errors: list[str] = []

    def hold(
        self,
        node_id: str,
        path: Path,
        fingerprint: dict[str, Any],
        verdicts: list[Verdict],
        baseline: BaselineFile | None,
        where: str,
    ) -> None:
        """Validate and hold the entries of ``verdicts``; a kept metric's verdict shows its comparison.

        Raises ``ValueError`` (failing the test that produced it) for an entry the reader would refuse.
        """
        from pytest_gpuperf.baselines.schema import entry_problem
        from pytest_gpuperf.baselines.store import ordered_entry

        metrics = [v.metric for v in verdicts]
        new = entries_for(metrics)
        for name, entry in new.items():
            problem = entry_problem(ordered_entry(entry))
            if problem:
                raise ValueError(f"{node_id}: metric {name!r} cannot be recorded as a baseline: {problem}")
        held = self.held.setdefault(node_id, HeldTest(path, fingerprint))
        key = _stored_key(node_id, str(fingerprint.get("backend", "")), baseline)
        if key != node_id:
            held.replaces = key
        stored = (baseline.stored.get(key) if baseline is not None else None) or {}
        expanded = (baseline.tests.get(key) if baseline is not None else None) or {}
        held.had_entry = held.had_entry or bool(stored)
        kept = {} if self.update_all else decide(metrics, expanded, new, where)
        for verdict in verdicts:
            name = verdict.metric.name
            if name in kept:
                held.entries[name] = stored[name]
                held.kept.add(name)
                judged = kept[name]
                verdict.baseline, verdict.ratio, verdict.ci = judged.baseline, judged.ratio, judged.ci
                verdict.message = f"kept: {judged.message}" if judged.message else "kept: within tolerance"
                verdict.metric.extra["baseline_kept"] = True
            else:
                held.entries[name] = new[name]
                held.kept.discard(name)
                if name in expanded:  # shown beside the new value; also tells the run the test had an entry
                    verdict.baseline = expanded[name].get("value")

    # -- pytest hooks (registered as a plugin under --gpuperf-update) ------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Commit a test's held entries when its call phase passed; drop them otherwise."""
        if report.when != "call":
            return
        held = self.held.pop(report.nodeid, None)
        if held is None:
            return
        if not report.passed:
            self.not_recorded.append(f"{report.nodeid} ({report.outcome})")
            return
        _, tests = self.committed.setdefault(held.path, (held.fingerprint, {}))
        tests[report.nodeid] = held.entries
        if held.replaces:
            tests[held.replaces] = None  # type: ignore[assignment] - the old key is removed (see update_baseline_file)
        counts = self.written.setdefault(str(held.path), {"kept": 0, "rewritten": 0, "tests": 0})
        counts["tests"] += 1
        counts["kept"] += len(held.kept)
        counts["rewritten"] += len(held.entries) - len(held.kept)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the committed entries of this process (each xdist worker writes its own, under the lock)."""
        from pytest_gpuperf.baselines.schema import BaselineError
        from pytest_gpuperf.baselines.store import update_baseline_file

        if session.config.hook.pytest_gpuperf_write_baselines(config=session.config) is False:
            self.committed.clear()  # a feature vetoed it (ranks other than 0 of an outer launch)
        for path, (fingerprint, tests) in sorted(self.committed.items()):
            if not tests:
                continue
            try:
                before = path.read_bytes() if path.exists() else None
                update_baseline_file(path, fingerprint, tests)
            except (BaselineError, OSError) as exc:
                self.errors.append(f"baselines not recorded: {exc}")
                self.written.pop(str(path), None)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            else:
                if before is not None and path.read_bytes() == before:
                    self.unchanged_files.append(str(path))
        self.committed.clear()
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller prints the summary
            workeroutput["gpuperf_baselines"] = self.summary()

    def summary(self) -> dict[str, Any]:
        """What this process wrote, kept and refused (JSON-able, merged across xdist workers)."""
        return {
            "written": self.written,
            "unchanged_files": self.unchanged_files,
            "not_recorded": self.not_recorded,
            "errors": self.errors,
        }
