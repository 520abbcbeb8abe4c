"""What ``--gpuperf-update`` writes: reviewable baselines from tests that passed.

* A judged entry is rewritten only when its metric moved past its tolerance (judged
  the way a normal run judges it, its spread rule included: a move within the spread
  between either recording's processes is kept), when how it was measured changed (unit, kind,
  direction, timing method), when it is new, when its recorded spread between
  processes is too wide to judge its tolerance (such an entry decides nothing), or
  when this recording measured more processes; otherwise the stored entry is kept
  byte for byte. So re-recording unchanged code gives a 0-line diff and an
  optimised test changes only the metrics that moved.
* Re-recording never loosens a time/throughput entry silently: one that measured
  slower past its tolerance keeps the stored entry and is listed, unless
  ``--gpuperf-accept-slower`` (or ``gpuperf_update_all``, which rewrites every
  entry of the tests that ran). The summary lists every judged entry that moved, old -> new.
* An informational entry (recorded, never judged: a roof share, a rank's rate) is
  written only when it is new or when a judged entry of its test is rewritten.
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
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baselines.policy import Decision, change_line, plan
from pytest_gpuperf.commands import update_command
from pytest_gpuperf.procs.lifetime import process_alive, process_start_time
from pytest_gpuperf.timing.kernel_signature import KIND_SIGNATURE

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.schema import BaselineFile
    from pytest_gpuperf.results import Metric, Verdict

#: Kinds whose entries keep their measurement facts (how they were timed, the clocks, the noise).
_FACT_KINDS = ("time", "throughput", "cycles", "host")
#: Numbers about a timing measurement its entry keeps (read by :mod:`pytest_gpuperf.judging.evidence`).
MEASUREMENT_FACTS = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "clock_exponent",  # how the step's time followed its SM clock (pytest_gpuperf.judging.clock_rule)
    "clock_exponent_se",
    "processes",
    "process_spread",
    "min_detectable_change",
    "noise_bound",
    "eager_time",
    "calibration",  # the host CPU's speed class (pytest_gpuperf.timing.calibration)
    "calibration_spread",
)

#: What a kernel signature's entry keeps beside its digest (:mod:`pytest_gpuperf.timing.kernel_signature`).
SIGNATURE_FIELDS = ("kernels", "launches", "distinct", "source")

Entries = dict[str, dict[str, dict[str, Any]]]


def metric_to_entry(metric: Metric) -> dict[str, Any]:
    """The baseline-file entry for one metric (samples thinned to evenly spaced order statistics)."""
    from pytest_gpuperf.stats import spread_subset

    entry: dict[str, Any] = {"value": metric.value, "unit": metric.unit, "better": metric.better, "kind": metric.kind}
    if metric.samples:
        entry["samples"] = spread_subset(list(metric.samples))
    if metric.kind == KIND_SIGNATURE:  # the digest and the heaviest kernels, reviewable line by line
        entry.update({key: metric.extra[key] for key in SIGNATURE_FIELDS if key in metric.extra})
    if metric.kind in _FACT_KINDS:
        if metric.extra.get("method"):
            entry["method"] = metric.extra["method"]  # how it was timed, so later runs time it the same way
        for key in MEASUREMENT_FACTS:  # the machine state and the noise between processes (judging's evidence)
            value = metric.extra.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                entry[key] = value
        if metric.extra.get("power_capped") is True:  # the clock rule judges time alone when both ran capped
            entry["power_capped"] = True
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
    #: The latest verdict of each metric (fresh processes' merged timing replaces the first process's).
    verdicts: dict[str, Verdict] = dataclasses.field(default_factory=dict)
    stored: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    expanded: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    decisions: dict[str, Decision] = dataclasses.field(default_factory=dict)
    new: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


#: Why a judged entry that existed was rewritten: each is listed in the update summary, old -> new.
LISTED = ("moved", "undecidable", "processes", "measured")


class BaselineUpdater:
    """Holds ``--gpuperf-update`` entries per test, commits those of passed tests, writes them at the end.

    ``committed`` (path -> (fingerprint, test id -> entries)) is its own unless a caller passes the dict to fill;
    a feature can veto writing them with the ``pytest_gpuperf_write_baselines`` hook. ``update_all`` rewrites
    every entry; ``accept_slower`` writes time/throughput entries that measured slower past their tolerance
    (by default they keep the stored entry and are listed).
    """

    def __init__(
        self,
        committed: dict[Path, tuple[dict[str, Any], Entries]] | None = None,
        update_all: bool = False,
        accept_slower: bool = False,
    ) -> None:
        self.committed: dict[Path, tuple[dict[str, Any], Entries]] = committed if committed is not None else {}
        self.update_all = update_all
        self.accept_slower = accept_slower
        self.held: dict[str, HeldTest] = {}
        self.not_recorded: list[str] = []
        self.written: dict[str, dict[str, int]] = {}
        self.moved: dict[str, list[str]] = {}
        self.looser: dict[str, list[str]] = {}
        self.unchanged_files: list[str] = []
        self.errors: list[str] = []
        self.repaired: list[str] = []
        #: The process that started this one and its start time: an xdist worker writes only while it lives.
        self._parent = (os.getppid(), process_start_time(os.getppid()))

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

        Called again with the merged timing of fresh processes: every entry of the test is decided again
        (an informational entry follows whether a judged one is rewritten). Raises ``ValueError`` (failing the
        test that produced it) for an entry the reader would refuse.
        """
        from pytest_gpuperf.baselines.schema import entry_problem
        from pytest_gpuperf.baselines.store import ordered_entry
        from pytest_gpuperf.validate import MAX_TEST_ID, name_problem

        problem = name_problem(node_id, "test id", MAX_TEST_ID)
        if problem:  # the reader would refuse the whole file: this test fails, the others are recorded
            raise ValueError(f"this test cannot be recorded as a baseline: {problem}")
        for name, entry in entries_for([v.metric for v in verdicts]).items():
            problem = entry_problem(ordered_entry(entry))
            if problem:
                raise ValueError(f"{node_id}: metric {name!r} cannot be recorded as a baseline: {problem}")
        held = self.held.setdefault(node_id, HeldTest(path, fingerprint))
        key = _stored_key(node_id, str(fingerprint.get("backend", "")), baseline)
        if key != node_id:
            held.replaces = key
        held.stored = (baseline.stored.get(key) if baseline is not None else None) or {}
        held.expanded = (baseline.tests.get(key) if baseline is not None else None) or {}
        held.had_entry = held.had_entry or bool(held.stored)
        held.verdicts.update({v.metric.name: v for v in verdicts})
        self._decide(node_id, held, where)

    def _decide(self, node_id: str, held: HeldTest, where: str) -> None:
        """Keep or write each held entry (see :func:`.policy.plan`) and show the comparison on its verdict."""
        metrics = [v.metric for v in held.verdicts.values()]
        held.new = entries_for(metrics)
        decisions = plan(metrics, held.expanded, held.new, where, self.accept_slower)
        if self.update_all:
            decisions = {
                n: dataclasses.replace(d, keep=False, why="moved" if d.why == "looser" else d.why)
                for n, d in decisions.items()
            }
        held.decisions, held.entries, held.kept = decisions, {}, set()
        for name, verdict in held.verdicts.items():
            decision, extra = decisions[name], verdict.metric.extra
            extra.pop("baseline_kept", None)
            extra.pop("baseline_looser", None)
            verdict.ratio = verdict.ci = None
            verdict.message = ""
            if not decision.keep:
                held.entries[name] = held.new[name]
                if name in held.expanded:  # shown beside the new value; also tells the run the test had an entry
                    verdict.baseline = held.expanded[name].get("value")
                    judged = decision.verdict
                    if judged is not None and decision.why in LISTED:
                        verdict.ratio, verdict.ci = judged.ratio, judged.ci
                        verdict.message = f"rewritten: {decision.detail or judged.message}"
                continue
            held.entries[name] = held.stored[name]
            held.kept.add(name)
            judged = decision.verdict
            verdict.baseline = held.expanded[name].get("value")
            if judged is not None:
                verdict.baseline, verdict.ratio, verdict.ci = judged.baseline, judged.ratio, judged.ci
            extra["baseline_kept"] = True
            if decision.why == "looser" and judged is not None:
                extra["baseline_looser"] = True
                verdict.message = (
                    f"kept, not written: {judged.message}; a slower entry would loosen the gate, so the stored one "
                    f"stays (if the slowdown is intended: {update_command([node_id], accept_slower=True)})"
                )
            elif decision.why == "noise" and judged is not None:
                verdict.message = f"kept: {judged.message}; {decision.detail}"
            else:
                verdict.message = f"kept: {judged.message}" if judged and judged.message else "kept: within tolerance"

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
        file = str(held.path)
        counts = self.written.setdefault(file, {"kept": 0, "rewritten": 0, "tests": 0})
        counts["tests"] += 1
        counts["kept"] += len(held.kept)
        counts["rewritten"] += len(held.entries) - len(held.kept)
        for name, decision in sorted(held.decisions.items()):
            verdict = held.verdicts[name]
            if not verdict.metric.judged or name not in held.expanded:
                continue
            tolerance = verdict.metric.tolerance
            detail = decision.detail or (f"tolerance {tolerance:.0%}" if tolerance is not None else "")
            line = change_line(report.nodeid, name, held.expanded[name], held.new[name], detail)
            if decision.why == "looser" and decision.keep:
                self.looser.setdefault(file, []).append(line)
            elif not decision.keep and decision.why in LISTED:
                self.moved.setdefault(file, []).append(line)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the committed entries of this process (each xdist worker writes its own, under the lock)."""
        from pytest_gpuperf.baselines.schema import BaselineError
        from pytest_gpuperf.baselines.store import update_baseline_file

        if session.config.hook.pytest_gpuperf_write_baselines(config=session.config) is False:
            self.committed.clear()  # a feature vetoed it (ranks other than 0 of an outer launch)
        cancelled = self._cancelled(session)
        if cancelled and any(tests for _, tests in self.committed.values()):
            self.errors.append(f"baselines not recorded: {cancelled}; nothing was written")
            self.committed.clear()
        for path, (fingerprint, tests) in sorted(self.committed.items()):
            if not tests:
                continue
            try:
                before = path.read_bytes() if path.exists() else None
                result = update_baseline_file(path, fingerprint, tests)
            except (BaselineError, OSError) as exc:
                self.errors.append(f"baselines not recorded: {exc}")
                self.written.pop(str(path), None)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            else:
                self.repaired += [f"dropped an entry the reader refuses: {problem}" for problem in result.dropped]
                if before is not None and path.read_bytes() == before:
                    self.unchanged_files.append(str(path))
        self.committed.clear()
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller prints the summary
            workeroutput["gpuperf_baselines"] = self.summary()

    def _cancelled(self, session: pytest.Session) -> str | None:
        """Why this update must write nothing: the user interrupted it, or (an xdist worker) its controller is
        gone (killed with SIGTERM or ``kill -9``: the user cancelled the run)."""
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:
            return "the update was interrupted"
        if getattr(session.config, "workerinput", None) is not None:
            parent, started = self._parent
            if os.getppid() != parent or not process_alive(parent, started):
                return "the xdist controller of this worker is gone (the run was cancelled)"
        return None

    def summary(self) -> dict[str, Any]:
        """What this process wrote, kept and refused (JSON-able, merged across xdist workers)."""
        return {
            "written": self.written,
            "moved": self.moved,
            "looser": self.looser,
            "unchanged_files": self.unchanged_files,
            "not_recorded": self.not_recorded,
            "errors": self.errors,
            "repaired": self.repaired,
        }
