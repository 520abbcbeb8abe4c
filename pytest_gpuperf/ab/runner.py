"""Worker processes of both sides, alternating A B B A ..., and the per-test evidence they return (:mod:`.evidence`).

Each round pair starts one worker of each side (pair 0: A then B, pair 1: B then A, ...), so
both sides see the same machine state on average; one worker process runs every selected test
of its side (``python -m pytest <scope> -p _gpuperf_ab_worker --gpuperf ...``) and writes its
results as JSON (:mod:`.worker_plugin`). After ``min_processes`` pairs, only the tests that are
still undecided get more pairs, up to ``max_processes``; a test whose file REF's side cannot import is settled
after the first pair (no later pair could measure A).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_gpuperf.ab.evidence import TestEvidence, WorkerRun, broken_tests, entry_of, judge_evidence
from pytest_gpuperf.ab.worker_process import FLOOR_ENV, GATE_ENV, Side, WarmWorker
from pytest_gpuperf.keys import ROOFS_ENV
from pytest_gpuperf.procs import FLOOR_DIR
from pytest_gpuperf.procs.guard import popen_guarded
from pytest_gpuperf.procs.payload import read_json, write_json

WORKER_MODULE = "_gpuperf_ab_worker"
#: ``python -c`` program of a worker: pytest with the arguments that follow, through the worker plugin's ``main``.
WORKER_MAIN = f"import sys; from {WORKER_MODULE} import main; main(sys.argv[1:])"
OUTPUT_TAIL = 3000
#: Seconds a worker that wrote its results gets to exit before it is killed.
EXIT_TIMEOUT = 60.0
__all__ = ["AbOutcome", "AbRunner", "Side", "child_env", "environment", "side_scope"]


@dataclass
class AbOutcome:
    """The result of all rounds: evidence per test, new and removed tests, the worker runs."""

    evidence: dict[str, TestEvidence] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    runs: list[WorkerRun] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    #: Wall seconds of all rounds, start-ups included.
    wall_s: float = 0.0

    def per_test(self) -> float:
        """Wall seconds of all rounds per test measured (what A/B added to the run, per test)."""
        return self.wall_s / len(self.evidence) if self.evidence else 0.0

    def cost(self, side: str) -> float:
        """Seconds ``side``'s workers measured per test they ran (from being told to run to their results; their
        start-up overlapped the other side's measuring before that)."""
        runs = [r for r in self.runs if r.side == side and r.tests]
        tests = sum(r.tests for r in runs)
        return sum(r.seconds for r in runs) / tests if tests else 0.0


@dataclass
class AbRunner:
    """Starts the workers of both sides and collects their evidence."""

    a: Side
    b: Side
    extra_args: list[str]
    min_processes: int = 2
    max_processes: int = 4
    timeout: float = 3600.0
    scratch: Path = field(default_factory=lambda: Path("."))
    #: pytest cache folder the workers of both sides share (roofs measured once, the same roofs for A and B);
    #: None: workers run without a cache.
    cache_dir: Path | None = None
    _spawned: list[WarmWorker] = field(default_factory=list, repr=False)
    #: Workers of the first round pairs started before the controller collected (:meth:`prestart`).
    _prestarted: list[WarmWorker | None] = field(default_factory=list, repr=False)
    #: Workers whose results are in and which may still be exiting: reaped before the next run's first measurement
    #: and by :meth:`discard` (the controller reports meanwhile).
    _exiting: list[WarmWorker] = field(default_factory=list, repr=False)
    _began: float = field(default=0.0, repr=False)
    #: Where a line goes after each round pair (the terminal reporter), so a long A/B run shows it is moving.
    progress: Callable[[str], None] | None = field(default=None, repr=False)

    def worker_command(self, side: Side, scope: list[str]) -> list[str]:
        """The worker's argv (no shell): pytest on ``scope`` with the worker plugin and ``--gpuperf``, started
        through the plugin's ``main`` (pytest, then an exit that skips the interpreter's module teardown)."""
        return [
            sys.executable,
            "-c",
            WORKER_MAIN,
            *scope,
            "-p",
            WORKER_MODULE,
            "--gpuperf",
            "--rootdir",
            str(side.rootdir),
            "-q",
            *(["-o", f"cache_dir={self.cache_dir}"] if self.cache_dir is not None else ["-p", "no:cacheprovider"]),
            *self.extra_args,
        ]

    def install_worker_plugin(self) -> Path:
        """Copy the worker plugin next to the scratch files; its folder goes on both sides' PYTHONPATH.

        Written to a file of this process's own, then renamed into place: a worker starting meanwhile (or another
        xdist worker's run installing it too) reads the old file or the new one, never a half-written one."""
        folder = self.scratch / "plugin"
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{WORKER_MODULE}.{os.getpid()}.tmp"
        shutil.copyfile(Path(__file__).with_name("worker_plugin.py"), partial)
        os.replace(partial, folder / f"{WORKER_MODULE}.py")
        return folder

    def _scope(self, side: Side, pair: int, selected: list[str], full_scope: bool) -> list[str]:
        """What a worker collects: the controller's whole scope in the first pair (and a scan, pair -1), so tests
        only on one side are found; later pairs, and runs without ``full_scope``, only the selected tests' files."""
        files = {n.split("::", 1)[0] for n in selected}
        scope = side.scope if pair <= 0 and full_scope else [str(side.rootdir / f) for f in sorted(files)]
        return [s for s in scope if Path(s.split("::", 1)[0]).exists()]

    def prestart(self) -> None:
        """Start the workers of the minimum round pairs now, on the controller's whole scope, while the controller
        itself still imports and collects; :meth:`run` adopts them (:meth:`discard` stops them if it never runs)."""
        self.install_worker_plugin()
        self._began = time.perf_counter()
        for pair, side in self._schedule()[: 2 * min(self.min_processes, self.max_processes)]:
            warm = self.spawn(side, pair, [], whole=True)
            self._prestarted.append(warm)
            if warm is not None:
                self._spawned.append(warm)

    def discard(self) -> None:
        """Kill prestarted workers no run adopted (no perf test was selected, collection failed): they measured
        nothing, and waiting for their start-up to hear "stop" would cost that start-up. Reap the ones that ran."""
        for warm in self._prestarted:
            if warm is not None:
                warm.kill()
        self._prestarted, self._spawned = [], []
        self.reap()

    def reap(self) -> None:
        """Wait for the exits of the workers that ran (killed after :data:`EXIT_TIMEOUT`)."""
        while self._exiting:
            self._exiting.pop().wait(EXIT_TIMEOUT)

    def spawn(
        self, side: Side, pair: int, selected: list[str], full_scope: bool = True, whole: bool = False
    ) -> WarmWorker | None:
        """Start a worker of ``side`` that starts up (Python, pytest, imports, collection, CUDA) and then waits.

        It measures nothing until :meth:`finish` tells it which tests to run, so its start-up overlaps the other
        side's measuring. ``selected``: every test it may be asked for (its files are collected); ``whole``: collect
        the controller's whole scope whatever the pair. None when there is nothing to collect.
        """
        stem = self.scratch / f"{side.name}{pair}"
        select, out = stem.with_suffix(".select.json"), stem.with_suffix(".out.json")
        select.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        scope = self._scope(side, 0 if whole else pair, selected, full_scope)
        if not scope:
            return None
        env = {**side.env, "GPUPERF_AB_SELECT": str(select), "GPUPERF_AB_OUT": str(out), GATE_ENV: "1"}
        env[FLOOR_ENV] = str(FLOOR_DIR)  # the worker plugin loads the floor from here, whatever the side imports
        proc = popen_guarded(  # the worker and all it starts die with this pytest (guard.py)
            self.worker_command(side, scope),
            cwd=side.cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return WarmWorker(side, pair, proc, select, out)

    def finish(self, warm: WarmWorker | None, side: Side, pair: int, selected: list[str]) -> WorkerRun:
        """Tell a spawned worker to run ``selected`` and read back its results (its exit is waited for later)."""
        run = WorkerRun(side.name, pair, 0.0, 0)
        if warm is None:
            run.data = {"collected": [], "tests": {}}
            return run
        write_json(warm.select, selected)
        began = time.perf_counter()
        finished = warm.release(self.timeout)
        run.seconds = time.perf_counter() - began
        run.timeline = warm.timeline(self._began or began)
        output, code = warm.output(), warm.proc.returncode
        if not finished:
            output += f"\n(worker killed after {self.timeout:.0f} s: gpuperf_ab_timeout)"
        try:
            run.data = read_json(warm.out)
        except (OSError, ValueError):
            warm.wait(self.timeout)
            output, code = warm.output(), warm.proc.returncode
            run.error = f"{side.name} worker (exit {code}) wrote no results:\n{output[-OUTPUT_TAIL:]}"
            run.data = {"collected": [], "tests": {}}
        run.tests = sum(1 for t in run.data.get("tests", {}).values() if t.get("outcome") != "not run")
        return run

    def start(self, side: Side, pair: int, selected: list[str], full_scope: bool = True) -> WorkerRun:
        """Run one worker of ``side`` on ``selected`` now and read back its results (see :meth:`spawn`)."""
        warm = self.spawn(side, pair, selected, full_scope)
        try:
            run = self.finish(warm, side, pair, selected)
        except BaseException:
            if warm is not None:
                warm.kill()
            raise
        if warm is not None:
            warm.wait(self.timeout)
        return run

    def run(self, nodeids: list[str], full_scope: bool = True) -> AbOutcome:
        """All round pairs for ``nodeids`` (the working tree's perf tests); see the module docstring.

        ``full_scope`` False (one test on a pytest-xdist worker): removed tests are only looked for in its file.
        """
        self.install_worker_plugin()
        outcome = AbOutcome()
        self._began = started = self._began or time.perf_counter()  # the prestarted workers' start-up counts too
        try:
            self._rounds(nodeids, full_scope, outcome)
        except BaseException:  # Ctrl-C, a signal, an error: every worker and what it started goes, now
            for warm in self._spawned:
                warm.kill()
            raise
        else:
            for warm in self._spawned:
                if warm.released_at:
                    self._exiting.append(warm)  # its results are in: it exits while the controller reports
                else:
                    warm.kill()  # no round needed it: it measured nothing, and "stop" would wait for its start-up
        finally:
            self._spawned, self._prestarted, self._began = [], [], 0.0
        outcome.wall_s = time.perf_counter() - started
        return outcome

    def _order(self, pair: int) -> tuple[Side, Side]:
        return (self.a, self.b) if pair % 2 == 0 else (self.b, self.a)

    def _schedule(self) -> list[tuple[int, Side]]:
        """(pair, side) of every worker that may run, in order: A B, B A, A B ..."""
        return [(pair, side) for pair in range(self.max_processes) for side in self._order(pair)]

    def _rounds(self, nodeids: list[str], full_scope: bool, outcome: AbOutcome) -> None:
        """The round pairs. The workers of the minimum pairs start up together, and all have started before the
        first one measures (no start-up beside a measurement, one start-up's wall time for all); each later pair
        starts up while the pair before it measures, and is killed unused when no test needs it."""
        pending = list(nodeids)
        broken: set[str] = set()
        schedule = self._schedule()
        ahead: dict[int, WarmWorker | None] = dict(enumerate(self._prestarted))  # started while collecting

        def warm_for(index: int) -> WarmWorker | None:
            if index not in ahead and index < len(schedule):
                pair, side = schedule[index]
                ahead[index] = self.spawn(side, pair, pending, full_scope)
                if ahead[index] is not None:
                    self._spawned.append(ahead[index])  # type: ignore[arg-type]
            return ahead.get(index)

        first = [warm_for(i) for i in range(2 * min(self.min_processes, self.max_processes))]
        self.reap()  # an earlier run's workers (one test per run on a pytest-xdist worker) are gone before measuring
        for warm in first:
            if warm is not None:
                warm.wait_ready(self.timeout)
        pair = 0
        while pending and pair < self.max_processes:
            warm_for(2 * pair + 2)  # the next pair starts up while this one measures (killed if not needed)
            warm_for(2 * pair + 3)
            order = self._order(pair)
            runs = {side.name: self.finish(warm_for(2 * pair + i), side, pair, pending) for i, side in enumerate(order)}
            outcome.runs += [runs[s.name] for s in order]
            measured = len(pending)
            if pair == 0:
                broken, pending = self._first_pair(runs, nodeids, pending, outcome)
            pending = self._add_pair(runs, pending, broken, outcome)
            pair += 1
            if pair >= self.min_processes:
                pending = self._settle(pending, outcome.evidence, final=pair >= self.max_processes)
            self._report_pair(pair, measured, runs, len(pending))
        for nodeid in pending:
            outcome.evidence[nodeid].verdicts = judge_evidence(outcome.evidence[nodeid], True)
        for run in outcome.runs:
            if run.side == "B" and run.pair == 0:
                for nodeid in outcome.new:
                    outcome.evidence.setdefault(nodeid, TestEvidence(nodeid)).b.append(entry_of(run, nodeid))

    def _report_pair(self, pair: int, measured: int, runs: dict[str, WorkerRun], undecided: int) -> None:
        """One progress line for a finished round pair: what it measured, how long it took, what is left."""
        if self.progress is None:
            return
        took = " and ".join(f"{name} {run.seconds:.1f} s" for name, run in sorted(runs.items()))
        left = f"{undecided} test(s) need another pair" if undecided else "every test decided"
        most = f"at least {self.min_processes}, at most {self.max_processes}"
        self.progress(f"round pair {pair} ({most}) measured {measured} test(s) per side ({took}); {left}")

    @staticmethod
    def _first_pair(
        runs: dict[str, WorkerRun], nodeids: list[str], pending: list[str], outcome: AbOutcome
    ) -> tuple[set[str], list[str]]:
        """After the first pair: the tests whose file REF cannot import (settled after this pair), the new and
        removed tests, and the pending tests A has."""
        broken = broken_tests(runs["A"], nodeids)
        a_has = set(runs["A"].data.get("collected", [])) | broken
        b_has = set(runs["B"].data.get("collected", []))
        if runs["A"].error is None:
            outcome.new = [n for n in nodeids if n not in a_has]
            outcome.removed = sorted(a_has - b_has - set(nodeids))
        return broken, [n for n in pending if n in a_has or runs["A"].error is not None]

    @staticmethod
    def _add_pair(runs: dict[str, WorkerRun], pending: list[str], broken: set[str], outcome: AbOutcome) -> list[str]:
        """Add one pair's entries to the evidence and its leaks to the outcome; settle the broken tests (no later
        pair could measure A either). The tests still pending."""
        evidence = outcome.evidence
        for nodeid in pending:
            item = evidence.setdefault(nodeid, TestEvidence(nodeid))
            item.a.append(entry_of(runs["A"], nodeid))
            item.b.append(entry_of(runs["B"], nodeid))
        for run in runs.values():
            tagged = [f"{run.side}: {leak}" for leak in run.data.get("leaks", [])]
            outcome.leaks += [leak for leak in tagged if leak not in outcome.leaks]
        for nodeid in broken.intersection(pending):
            evidence[nodeid].verdicts = judge_evidence(evidence[nodeid], True)
        return [n for n in pending if n not in broken]

    @staticmethod
    def _settle(pending: list[str], evidence: dict[str, TestEvidence], final: bool) -> list[str]:
        """Judge the pending tests after a pair (``final``: no pair follows); the ones still undecided."""
        for nodeid in pending:
            evidence[nodeid].verdicts = judge_evidence(evidence[nodeid], final)
        undecided = [n for n in pending if not evidence[n].decided and not evidence[n].errors("B")]
        for nodeid in set(pending) - set(undecided):  # settle what stays undecided for another reason
            evidence[nodeid].verdicts = judge_evidence(evidence[nodeid], True)
        return undecided

    def scan(self) -> tuple[list[str], list[str]] | None:
        """Both sides' perf tests by collection alone (nothing runs): ``(new, removed)``, None when A failed.

        The pytest-xdist controller uses it: its workers each see one test's file, so a test removed with its
        whole file would otherwise never be listed.
        """
        self.install_worker_plugin()
        runs = {side.name: self.start(side, -1, []) for side in (self.a, self.b)}
        if runs["A"].error is not None:
            return None
        b_has = list(runs["B"].data.get("collected", []))
        a_has = set(runs["A"].data.get("collected", [])) | broken_tests(runs["A"], b_has)
        return [n for n in b_has if n not in a_has], sorted(a_has - set(b_has))


def child_env(base: dict[str, str], pythonpath: str, foreign_root: Path | None, own_root: Path) -> dict[str, str]:
    """A worker's environment: ``PYTHONPATH`` set, CI summary and xdist worker variables removed."""
    env = {k: v for k, v in base.items() if not k.startswith("PYTEST_XDIST_") and k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONPATH"] = pythonpath
    env["GPUPERF_AB_SIDE_ROOT"] = str(own_root)
    env[ROOFS_ENV] = "always"  # A and B compare their bound classes: both classify, against the shared roofs
    if foreign_root is not None:
        env["GPUPERF_AB_FOREIGN_ROOT"] = str(foreign_root)
    else:
        env.pop("GPUPERF_AB_FOREIGN_ROOT", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def side_scope(args: list[str], tree: Path, side_root: Path) -> list[str]:
    """The controller's test paths (absolute, inside ``tree``) at the same places in ``side_root``."""
    scope = []
    for arg in args:
        path, sep, rest = arg.partition("::")
        try:
            relative = Path(path).resolve().relative_to(tree)
        except ValueError:
            continue
        scope.append(str(side_root / relative) + sep + rest)
    return scope


def environment() -> dict[str, str]:
    """A copy of this process's environment."""
    return dict(os.environ)
