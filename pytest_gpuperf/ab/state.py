"""The A/B run of one pytest process: REF's worktree, both sides' workers, their evidence per test."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.ab.gitref import Worktree, toplevel
from pytest_gpuperf.settings import get_option

if TYPE_CHECKING:
    from pytest_gpuperf.ab.runner import AbOutcome, AbRunner
    from pytest_gpuperf.extensions import PerfSession
    from pytest_gpuperf.hookspecs import FailureReason, ReportSection, SummarySection, VerdictsInstead
    from pytest_gpuperf.reporting.records import TestRecord
    from pytest_gpuperf.results import Verdict

PERF_FIXTURES = ("gpuperf", "gpuperf_torchrun")
#: What the process that checked REF out hands to its pytest-xdist workers (they inherit its environment):
#: the worktree, its sha, and its ``--dist`` mode (xdist sets ``dist = "no"`` in a worker's own options).
ENV_WORKTREE, ENV_SHA, ENV_DIST = "GPUPERF_AB_WORKTREE", "GPUPERF_AB_SHA", "GPUPERF_AB_DIST"


@dataclass
class AbState:
    """Everything ``--gpuperf-ab`` keeps for one pytest process (registered as a plugin: it answers the outcome and
    summary hooks of :mod:`pytest_gpuperf.hookspecs`)."""

    config: pytest.Config
    session: PerfSession
    worktree: Worktree
    tree: Path
    runner: AbRunner | None = None
    outcome: AbOutcome | None = None
    warnings: list[str] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)
    #: Per test measured here: its A/B record (the report payload's ``ab``) and the verdicts reported instead.
    applied: dict[str, dict[str, Any]] = field(default_factory=dict)
    instead: dict[str, VerdictsInstead] = field(default_factory=dict)
    #: The xdist controller's scan of both sides for new and removed tests (:meth:`scan_scope`).
    scanner: threading.Thread | None = None

    @classmethod
    def start(cls, config: pytest.Config, session: PerfSession, ref: str) -> AbState:
        """Resolve REF and check it out (an xdist worker reuses its controller's worktree)."""
        from pytest_gpuperf.ab.gitref import check_ref_name

        ref = check_ref_name(ref)
        tree = toplevel(config.rootpath)
        shared = os.environ.get(ENV_WORKTREE)
        if hasattr(config, "workerinput") and shared:
            worktree = Worktree(ref, os.environ.get(ENV_SHA, ""), tree, Path(shared), owned=False)
        else:
            worktree = Worktree.create(tree, ref)
        minimum = get_option(config, "gpuperf_ab_processes")
        maximum = get_option(config, "gpuperf_ab_max_processes")
        if maximum < minimum:
            worktree.remove()
            raise pytest.UsageError(
                f"gpuperf_ab_max_processes ({maximum}) must be at least gpuperf_ab_processes ({minimum})"
            )
        return cls(config, session, worktree, tree)

    # -- where we are ------------------------------------------------------------
    @property
    def is_xdist_worker(self) -> bool:
        """True in a pytest-xdist worker."""
        return hasattr(self.config, "workerinput")

    @property
    def is_xdist_controller(self) -> bool:
        """True in the pytest-xdist controller (it runs no tests)."""
        return not self.is_xdist_worker and getattr(self.config.option, "dist", "no") != "no"

    @property
    def title(self) -> str:
        """``gpuperf A/B against REF (sha)``."""
        return f"gpuperf A/B against {self.worktree.ref} ({self.worktree.short})"

    def is_perf(self, item: pytest.Item) -> bool:
        """True for tests that use the ``gpuperf`` (or ``gpuperf_torchrun``) fixture."""
        return any(name in getattr(item, "fixturenames", ()) for name in PERF_FIXTURES)

    # -- running -----------------------------------------------------------------
    def _runner(self) -> AbRunner:
        if self.runner is None:
            from pytest_gpuperf.ab.sides import build_runner

            self.runner, warnings = build_runner(self.config, self.session, self.worktree, self.tree)
            self.warnings += warnings
        return self.runner

    def prestart(self) -> None:
        """Start the first round pairs' workers while this process collects (a plain run, not under xdist)."""
        if self.is_xdist_worker or self.is_xdist_controller:
            return
        try:
            self._runner().prestart()
        except OSError as exc:  # they start again when the rounds begin, and fail there with their reason
            self.warnings.append(f"could not start A/B workers ahead of collection: {exc}")

    def discard(self) -> None:
        """Kill workers started ahead that no run used (nothing to measure, collection failed, --collect-only) and
        wait for the exits of the ones that ran."""
        if self.runner is not None:
            self.runner.discard()

    def hand_to_xdist_workers(self, clear: bool = False) -> None:
        """Put the worktree, its sha and ``--dist`` in the environment xdist workers inherit (``clear``: remove)."""
        if clear:
            for name in (ENV_WORKTREE, ENV_SHA, ENV_DIST):
                os.environ.pop(name, None)
            return
        os.environ[ENV_WORKTREE], os.environ[ENV_SHA] = str(self.worktree.path), self.worktree.sha
        os.environ[ENV_DIST] = str(getattr(self.config.option, "dist", "no"))

    def scan_scope(self) -> None:
        """On the pytest-xdist controller: new and removed tests from both sides' collections (a thread).

        Started before the workers run and read by :meth:`summary` (:meth:`finish_scan` waits for it).
        """
        from pytest_gpuperf.ab.runner import AbOutcome

        runner = self._runner()
        self.outcome = AbOutcome()
        outcome = self.outcome

        def scan() -> None:
            try:
                found = runner.scan()
            except Exception as exc:  # noqa: BLE001 - the test verdicts stand without the lists
                self.warnings.append(f"could not list new and removed tests: {type(exc).__name__}: {exc}")
                return
            if found is None:
                self.warnings.append("could not list new and removed tests: REF's side failed to collect")
            else:
                outcome.new, outcome.removed = found

        self.scanner = threading.Thread(target=scan, name="gpuperf-ab-scan", daemon=True)
        self.scanner.start()

    def finish_scan(self) -> None:
        """Wait for :meth:`scan_scope` (when one was started)."""
        if self.scanner is not None:
            self.scanner.join()

    def batch_for(self, item: pytest.Item) -> list[pytest.Item]:
        """The tests an xdist worker measures together with ``item``: its whole file under ``--dist loadfile``.

        Under ``loadfile`` every test of a file comes to this worker, so one round of worker processes per side
        serves them all (4 process starts per file instead of per test); under other modes a test's neighbours
        may go to another worker, so only ``item`` is measured.
        """
        if os.environ.get(ENV_DIST) != "loadfile":  # the controller's --dist
            return [item]
        path = item.path
        return [i for i in item.session.items if i.path == path and i.nodeid not in self.handled] or [item]

    def run_items(self, items: list[pytest.Item]) -> None:
        """Run the A/B rounds for the perf tests among ``items`` (those not skipped by a marker)."""
        nodeids = [i.nodeid for i in items if self.is_perf(i) and i.get_closest_marker("skip") is None]
        self.handled.update(nodeids)
        if not nodeids:
            return
        runner = self._runner()
        runner.progress = self._progress(len(nodeids))
        outcome = runner.run(nodeids, full_scope=not self.is_xdist_worker)
        if self.outcome is None:
            self.outcome = outcome
        else:
            self.outcome.evidence.update(outcome.evidence)
            self.outcome.new += outcome.new
            self.outcome.runs += outcome.runs
            self.outcome.wall_s += outcome.wall_s
            self.outcome.leaks += [x for x in outcome.leaks if x not in self.outcome.leaks]

    def _progress(self, tests: int) -> Callable[[str], None] | None:
        """Where the rounds' progress lines go: pytest's terminal, flushed (none on an xdist worker or under -qq)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.is_xdist_worker or int(getattr(self.config.option, "verbose", 0) or 0) < -1:
            return None

        def say(line: str) -> None:
            reporter.write_line(f"{self.title}: {line}")
            reporter.flush()

        say(f"measuring {tests} perf test(s) in alternating worker processes of both sides")
        return say

    def apply(self, item: pytest.Function) -> bool | None:
        """Turn the evidence of ``item`` into its verdicts (True: the body is not run here)."""
        from pytest_gpuperf.ab.verdicts import apply_evidence

        outcome = self.outcome
        if outcome is None or item.nodeid not in outcome.evidence:
            return None  # not measured by the workers (skipped there): run it the normal way
        evidence = outcome.evidence[item.nodeid]
        record, instead = apply_evidence(self.session, self.worktree, item, evidence, outcome)
        self.applied[item.nodeid], self.instead[item.nodeid] = record, instead
        return True

    # -- the outcome and summary hooks ----------------------------------------------
    def pytest_gpuperf_replace_verdicts(self, item: pytest.Item, verdicts: list[Verdict]) -> VerdictsInstead | None:
        """A measured test reports its A/B pair verdicts, not the stored-baseline ones."""
        return self.instead.get(item.nodeid)

    def pytest_gpuperf_report_sections(self, item: pytest.Item) -> list[ReportSection] | None:
        """The A/B record in the report's payload (``ab``) and as user properties."""
        result = self.applied.get(item.nodeid)
        if result is None:
            return None
        from pytest_gpuperf.hookspecs import ReportSection

        properties = [("gpuperf.ab", f"A/B against {self.worktree.ref} ({self.worktree.short}): {result['status']}")]
        for metric in result["metrics"]:
            line = f"A {metric['a']} -> B {metric['b']} {metric['unit']} [{metric['status']}]"
            properties.append((f"gpuperf.ab.{metric['metric']}", line))
        return [ReportSection("ab", properties=tuple(properties), payload={"ab": result})]

    def pytest_gpuperf_failure_reasons(self, item: pytest.Item, verdicts: list[Verdict]) -> list[FailureReason] | None:
        """Under ``--gpuperf-strict`` an inconclusive A/B metric fails the test."""
        result = self.applied.get(item.nodeid)
        if result is None or not self.session.settings.strict:
            return None
        lines = [f"  {m['label']}: {m['message']}" for m in result["metrics"] if m["status"] == "inconclusive"]
        if not lines:
            return None
        from pytest_gpuperf.hookspecs import FailureReason

        head = f"pytest-gpuperf: {self.title}: inconclusive (--gpuperf-strict)"
        return [FailureReason("ab", "\n".join([head, *lines]))]

    def pytest_gpuperf_summary_sections(self, config: pytest.Config, records: list[TestRecord]) -> list[SummarySection]:
        """The A/B block: both sides' numbers per test, new and removed tests, cost, warnings (JSON: ``ab``)."""
        if self.is_xdist_worker:
            return []
        from pytest_gpuperf.ab.report import markdown_lines, terminal_lines
        from pytest_gpuperf.hookspecs import SummarySection
        from pytest_gpuperf.reporting.terminal import warnings_shown

        summary = self.summary(records)
        verbosity = int(getattr(config.option, "verbose", 0) or 0)
        lines = tuple(terminal_lines(summary, verbosity, reasons=not warnings_shown(config)))
        markdown = "\n".join(markdown_lines(summary))
        return [SummarySection(self.title, lines, order=30, markdown=markdown, json={"ab": summary})]

    def summary(self, records: list[TestRecord]) -> dict[str, Any]:
        """Everything the A/B section of the reports shows (JSON-able), with each test's A/B record of ``records``."""
        outcome = self.outcome
        warnings = list(self.warnings)
        for side, where in (("A", "REF's worktree"), ("B", "the working tree")):
            leaks = [leak[3:] for leak in (outcome.leaks if outcome else []) if leak.startswith(f"{side}: ")]
            if leaks:
                more = len(leaks) - 5
                shown = ", ".join(leaks[:5]) + (f" and {more} more" if more > 0 else "")
                warnings.append(
                    f"side {side} imported project module(s) from outside {where}: {shown}; A/B cannot guarantee "
                    f"that side {side} ran {'REF' if side == 'A' else 'the working tree'}'s code"
                )
        runs = outcome.runs if outcome else []
        tests = [(r.nodeid, {"outcome": r.outcome, **r.data["ab"]}) for r in records if r.data.get("ab")]
        return {
            "ref": self.worktree.ref,
            "sha": self.worktree.sha,
            "title": self.title,
            "tests": dict(sorted(tests)),
            "new": sorted(outcome.new) if outcome else [],
            "removed": sorted(outcome.removed) if outcome else [],
            "warnings": warnings,
            "processes": {
                "A": sum(1 for r in runs if r.side == "A"),
                "B": sum(1 for r in runs if r.side == "B"),
                "min": get_option(self.config, "gpuperf_ab_processes"),
                "max": get_option(self.config, "gpuperf_ab_max_processes"),
            },
            "max_time": get_option(self.config, "gpuperf_ab_max_time"),
            "xdist": self.is_xdist_controller,
            "cost_per_test_s": {"A": outcome.cost("A"), "B": outcome.cost("B")} if outcome else {},
            "wall_per_test_s": outcome.per_test() if outcome else 0.0,
            "wall_s": round(outcome.wall_s, 3) if outcome else 0.0,
            "workers": [run.as_dict() for run in runs],
            "worker_errors": [r.error for r in runs if r.error][:4],
        }
