"""Nsight Compute capture of measured steps: every ncu test of a session in ONE child pytest under ncu.

ncu's own start-up and the child's CUDA initialisation cost far more than the kernels, so they are paid once per
session:

* parent side (:func:`capture_session`): run ``ncu --profile-from-start off --clock-control
  none --metrics <SOL> --csv --page raw --print-units base -- python -m pytest <ids...>``
  over every selected ncu test, with :data:`ENV_MANIFEST` naming a manifest file;
* child side (:func:`~pytest_gpuperf.profiling.ncu_child.capture_window`, in place of each ``measure()`` in the
  child): a warm call, a ranking call of the step's operations (:mod:`.ncu_select`), then its own capture window,
  opened by a one-thread marker kernel (``torch.cuda._sleep``, ncu shows it as ``spin_kernel``), with the profiler
  on around the top operations (or the whole call); the window's (test id, step, occurrence) and what was chosen
  are appended to the manifest;
* the parent parses the CSV once and cuts the kernel list at the markers: the n-th window
  is the manifest's n-th opened window (:mod:`.ncu_windows`).

The session has one budget (``gpuperf_ncu_timeout``, :mod:`.ncu_budget`): the child stops opening windows before it
runs out and ends normally, so ncu writes what it captured; past the deadline the parent interrupts the child, then
kills the guard's group, and keeps the windows ncu wrote in full.

The command line is built in :mod:`.ncu_command`, the child's side lives in :mod:`.ncu_child`; the child is
started under the floor's guard and, prestarted, waits at its gate file (:mod:`pytest_gpuperf.procs`).

ncu missing, or unable to read the GPU's counters (``ERR_NVGPUCTRPERM``,
``LibraryNotLoaded`` ...), raises :class:`NcuUnavailable`; the caller skips the test.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.procs.folders import make_pool_dir, remove_pool_dir
from pytest_gpuperf.procs.gate import GO, STOP, FileGate
from pytest_gpuperf.procs.guard import popen_guarded, stop_guarded
from pytest_gpuperf.profiling.ncu_budget import interrupt_then_stop, read_pid, write_deadline
from pytest_gpuperf.profiling.ncu_child import (
    ENV_MANIFEST,
    GATE_ENV,
    GATE_PARENT_ENV,
    bracket_step,
    child_manifest,
    wait_for_gate,
)
from pytest_gpuperf.profiling.ncu_command import (
    child_pytest_args,
    find_ncu,
    forwarded_options,
    import_report,
    ncu_prefix,
    ncu_test_key,
)
from pytest_gpuperf.profiling.ncu_windows import (
    Manifest,
    NcuCapture,
    NcuUnavailable,
    SessionCapture,
    parse_session,
    read_manifest,
    read_manifest_file,
    split_windows,
    tail,
)

__all__ = [
    "ENV_MANIFEST",
    "GATE_ENV",
    "GATE_PARENT_ENV",
    "NcuCapture",
    "NcuUnavailable",
    "PendingSession",
    "SessionCapture",
    "bracket_step",
    "capture_session",
    "child_manifest",
    "child_pytest_args",
    "find_ncu",
    "forwarded_options",
    "ncu_prefix",
    "ncu_test_key",
    "read_manifest",
    "split_windows",
    "start_session",
    "wait_for_gate",
]

#: How long a discarded child may take to leave before it is killed.
DISCARD_WAIT_SECONDS = 5.0
DEFAULT_TIMEOUT = 300.0


def capture_session(
    ncu: str,
    node_ids: Sequence[str],
    backend: str,
    rootdir: Path,
    csv_path: Path,
    timeout: float = DEFAULT_TIMEOUT,
    xdist: bool = False,
    **options: Any,
) -> SessionCapture:
    """Run ``node_ids`` in one child pytest under ncu; every ``measure()`` there is one capture window.

    ``options``: :func:`start_session`'s ``invocation_dir``, ``inifile``, ``parent_args``, ``keys``,
    ``full_report`` and ``all_processes``; ``timeout`` is the session's budget.
    """
    return start_session(ncu, node_ids, backend, rootdir, csv_path, xdist, budget=timeout, **options).finish(timeout)


def start_session(
    ncu: str,
    node_ids: Sequence[str],
    backend: str,
    rootdir: Path,
    csv_path: Path,
    xdist: bool = False,
    invocation_dir: Path | None = None,
    inifile: Path | None = None,
    parent_args: Sequence[str] = (),
    keys: dict[str, str] | None = None,
    gated: bool = False,
    full_report: Path | None = None,
    budget: float = DEFAULT_TIMEOUT,
    all_processes: bool = False,
) -> PendingSession:
    """Start the ncu child of :func:`capture_session`; ``gated``: it starts up (ncu, Python, imports, collection,
    CUDA context) and then waits until :meth:`PendingSession.release` (or :meth:`~PendingSession.discard`), so its
    start-up overlaps the parent's measuring of the tests before the first ncu test.

    The child runs where the parent was started (``invocation_dir``, default ``rootdir``: ``python -m pytest``
    puts it on ``sys.path``, as it did for the parent) with the parent's rootdir, ini file and plugin options.
    ``keys``: each node id's :func:`ncu_test_key` (the child is given those; without them, the node ids).
    ``full_report``: also keep ncu's ``--set full`` report of the windows there (``gpuperf_ncu_full_report``).
    ``budget``: the session's seconds from the release on; ``all_processes``: ncu follows the child's own child
    processes too (a distributed test's ranks), else only the child.
    """
    if not os.access(ncu, os.X_OK):  # the guard would start, then fail to run it: say why here
        raise NcuUnavailable(f"cannot start ncu ({ncu}): not an executable file")
    keys = dict(keys or {})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    csv_path.unlink(missing_ok=True)
    pending = PendingSession(make_pool_dir("ncu"), csv_path, list(node_ids), keys, full_report, budget)
    if full_report is not None:
        full_report.unlink(missing_ok=True)
    env = {**os.environ, ENV_MANIFEST: str(pending.path(MANIFEST))}
    if gated:
        env.update({GATE_ENV: str(pending.path(GATE)), GATE_PARENT_ENV: str(os.getpid())})
    selection = [keys.get(n, n) for n in node_ids]
    pending.command = ncu_prefix(ncu, csv_path, full_report, all_processes) + child_pytest_args(
        selection, backend, pending.scratch, xdist, rootdir, inifile, parent_args
    )
    try:
        with open(pending.path(STDOUT), "wb") as out, open(pending.path(STDERR), "wb") as err:
            pending.proc = popen_guarded(
                pending.command,
                env=env,
                cwd=invocation_dir or rootdir,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
    except OSError as exc:
        remove_pool_dir(pending.scratch)
        raise NcuUnavailable(f"cannot start ncu ({ncu}): {exc}") from None
    if not gated:
        pending.release()
    return pending


#: The files of a child's folder: the windows it opened (it appends), its gate, its stdout and stderr.
MANIFEST, GATE, STDOUT, STDERR = "windows.jsonl", "gate", "stdout.txt", "stderr.txt"


@dataclass
class PendingSession:
    """A started ncu child: :meth:`release` lets a gated one run, :meth:`finish` waits for its capture."""

    scratch: Path
    csv_path: Path
    tests: list[str]
    keys: dict[str, str]
    #: Where ncu writes its ``--set full`` report (None: not asked for).
    full_report: Path | None = None
    #: The session's seconds from the release on (``gpuperf_ncu_timeout``).
    budget: float = DEFAULT_TIMEOUT
    command: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    #: perf_counter seconds when the child was told to run (0.0: not yet), and when its budget ends.
    released_at: float = 0.0
    deadline: float = 0.0

    def path(self, name: str) -> Path:
        """A file of the child's folder (:data:`MANIFEST`, :data:`GATE`, :data:`STDOUT`, :data:`STDERR`)."""
        return self.scratch / name

    def release(self, budget: float | None = None) -> None:
        """Let the child run its tests (it may still be starting up; it runs as soon as it is ready), with the
        session's deadline ``budget`` seconds (default :attr:`budget`) from now."""
        if not self.released_at:
            self.released_at = time.perf_counter()
            self._deadline(self.budget if budget is None else budget)
            FileGate(self.path(GATE)).open(GO)

    def _deadline(self, budget: float) -> None:
        """Set the session's deadline ``budget`` seconds from now, for the parent's wait and the child."""
        self.budget, self.deadline = budget, time.perf_counter() + budget
        write_deadline(self.scratch, time.time() + budget, budget)

    def finish(self, timeout: float | None = None) -> SessionCapture:
        """Release the child (``timeout``: its budget, when not released yet), wait for it until the deadline and
        parse what it captured; past the deadline it is interrupted, then stopped, and the windows ncu wrote in
        full are kept (the others' tests are skipped with ncu's last words).

        The capture's ``wall_s`` is the wait from the release on: what the parent's tests paid for it."""
        if self.released_at and timeout is not None and time.perf_counter() + timeout < self.deadline:
            self._deadline(timeout)  # released at its start, and now given less time
        self.release(timeout)
        assert self.proc is not None
        left = self.deadline - time.perf_counter()
        try:
            self.proc.wait(max(left, 0.0))
            overran = False
        except subprocess.TimeoutExpired:
            interrupt_then_stop(self.proc, read_pid(self.scratch), stop_guarded)
            overran = True
        try:
            output = self._output()
            manifest = read_manifest_file(self.path(MANIFEST))
        finally:
            remove_pool_dir(self.scratch)
        report = self.full_report if self.full_report is not None and self.full_report.exists() else None
        if report is not None:
            output += "\n" + import_report(self.command[0], report)  # the rows, when the log held none
        missing = self._overrun(manifest, output) if overran else manifest.stop_reason()
        session = self._parse(output, manifest, missing, overran)
        session.keys, session.facts, session.report = self.keys, manifest.facts, report
        session.skipped, session.missing_reason = manifest.skipped, missing
        session.output_tail = tail(output, 3)
        return session

    def _parse(self, output: str, manifest: Manifest, missing: str, overran: bool) -> SessionCapture:
        """The windows ncu wrote; with none, a session of skips only when the child skipped (the budget)."""
        wall = time.perf_counter() - self.released_at
        try:
            return parse_session(
                self.csv_path, output, manifest.opened, wall, self.command, self.tests, manifest.pids, overran
            )
        except NcuUnavailable as exc:
            if "cannot read GPU counters" in str(exc):
                raise
            if overran:
                raise NcuUnavailable(missing) from None
            if manifest.opened or not manifest.skipped:
                raise
        return SessionCapture({}, self.csv_path, wall, self.command, self.tests)

    def _overrun(self, manifest: Manifest, output: str) -> str:
        """Why the session was stopped: its budget, how far the child got, and ncu's own last words."""
        done = sorted({test.rsplit("/", 1)[-1] for test, _, _ in manifest.opened})
        last_words = tail(output, 3) or "nothing"
        return (
            f"the ncu session of {len(self.tests)} test(s) ran past its {self.budget:.0f} s budget (ini key "
            f"gpuperf_ncu_timeout) and was stopped; windows captured: {', '.join(done) or 'none'} "
            f"(those ncu wrote in full keep their class; ncu replays each kernel of a window, so a step of many "
            f"kernels takes long); ncu's last words: {last_words}"
        )

    def discard(self) -> None:
        """The session ended before any test needed the capture: tell the child to leave, and make sure it did."""
        if self.proc is None or self.released_at:
            return
        FileGate(self.path(GATE)).open(STOP)
        try:
            self.proc.wait(DISCARD_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        self._stop()
        remove_pool_dir(self.scratch)

    def _stop(self) -> None:
        if self.proc is not None:
            stop_guarded(self.proc)

    def _output(self) -> str:
        paths = (self.path(STDOUT), self.path(STDERR))
        return "\n".join(p.read_text(encoding="utf-8", errors="replace") if p.exists() else "" for p in paths)
