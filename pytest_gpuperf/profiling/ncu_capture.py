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
  is the manifest's n-th line (:func:`split_windows`).

The command line is built in :mod:`.ncu_command`, the child's side lives in :mod:`.ncu_child`; the child is
started under the floor's guard and, prestarted, waits at its gate file (:mod:`pytest_gpuperf.procs`).

ncu missing, or unable to read the GPU's counters (``ERR_NVGPUCTRPERM``,
``LibraryNotLoaded`` ...), raises :class:`NcuUnavailable`; the caller skips the test.
"""

from __future__ import annotations

import json
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
from pytest_gpuperf.profiling.ncu_child import (
    ENV_MANIFEST,
    GATE_ENV,
    GATE_PARENT_ENV,
    MARKER_KERNEL,
    WindowKey,
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
from pytest_gpuperf.profiling.ncu_parse import KernelRecord, NcuParseError, csv_rows, parse_raw, unavailable_reason

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
    "split_windows",
    "start_session",
    "wait_for_gate",
]

#: How long a discarded child may take to leave before it is killed.
DISCARD_WAIT_SECONDS = 5.0
DEFAULT_TIMEOUT = 300.0


class NcuUnavailable(Exception):
    """ncu cannot profile here; ``str(exc)`` is the reason shown on the skipped test."""


@dataclass
class NcuCapture:
    """Kernels ncu profiled in one step's window, and where the session's CSV was kept."""

    kernels: list[KernelRecord]
    csv_path: Path
    wall_s: float
    command: list[str]
    #: What the child chose to profile in this window (``ncu_select.Selection.facts``; empty: not said).
    selection: dict[str, Any] = field(default_factory=dict)
    #: ncu's ``--set full`` report holding this window (None unless ``gpuperf_ncu_full_report``).
    report: Path | None = None


@dataclass
class SessionCapture:
    """What one ncu child process captured: kernels per window, its cost, and its command."""

    windows: dict[WindowKey, list[KernelRecord]]
    csv_path: Path
    wall_s: float
    command: list[str]
    tests: list[str] = field(default_factory=list)
    #: The parent's node id -> its :func:`ncu_test_key` (the name the child records its windows under).
    keys: dict[str, str] = field(default_factory=dict)
    #: The last lines of the child's output (its pytest summary), for the reason of a missing window.
    output_tail: str = ""
    #: Each window's manifest facts (what the child chose to profile).
    facts: dict[WindowKey, dict[str, Any]] = field(default_factory=dict)
    #: The session's ``--set full`` report (None unless asked for).
    report: Path | None = None

    def capture(self, node_id: str, step: str, occurrence: int) -> NcuCapture:
        """The window of one step; NcuUnavailable when the child never reached it (naming what it did record)."""
        keys = [(self.keys[node_id], step, occurrence)] if node_id in self.keys else []
        keys.append((node_id, step, occurrence))
        found = next((key for key in keys if key in self.windows), None)
        if found is None:
            recorded = sorted({f"{test} step {name!r}" for test, name, _ in self.windows})
            raise NcuUnavailable(
                f"the ncu session ({len(self.tests)} test(s)) captured no window for {node_id} step {step!r}; "
                f"the child run of the test did not reach that measure() call (see {self.csv_path}); "
                f"windows recorded: {', '.join(recorded[:6]) or 'none'}; child output: {self.output_tail}"
            )
        facts = self.facts.get(found, {})
        return NcuCapture(self.windows[found], self.csv_path, self.cost_per_test, self.command, facts, self.report)

    @property
    def cost_per_test(self) -> float:
        """Wall seconds of the ncu child divided by the tests it captured."""
        return self.wall_s / max(1, len(self.tests))


def split_windows(
    kernels: Sequence[KernelRecord], manifest: Sequence[WindowKey], pids: Sequence[object] = ()
) -> dict[WindowKey, list[KernelRecord]]:
    """Cut ncu's kernel list at the marker kernels: the n-th window belongs to the manifest's n-th entry.

    ``pids``: the process that opened each window (a distributed test's rank 0 is not the child). ncu lists each
    process's kernels in order, but not the processes in the order their windows opened, so when the windows'
    processes are the kernels' (ncu's ``Process ID``) each process is cut on its own. Raises
    :class:`NcuParseError` when the markers and the manifest disagree (the windows cannot be attributed then).
    """
    processes = {str(pid) for pid in pids}
    if len(processes) > 1 and len(pids) == len(manifest) and processes == {k.process for k in kernels}:
        windows_of: dict[WindowKey, list[KernelRecord]] = {}
        for process in sorted(processes):
            mine = [key for key, pid in zip(manifest, pids, strict=True) if str(pid) == process]
            windows_of.update(split_windows([k for k in kernels if k.process == process], mine))
        return {key: windows_of[key] for key in manifest}
    windows: list[list[KernelRecord]] = []
    for kernel in kernels:
        if MARKER_KERNEL in kernel.name:
            windows.append([])
        elif windows:
            windows[-1].append(kernel)
        else:
            raise NcuParseError(f"kernel {kernel.short_name()!r} was captured before any window marker")
    if len(windows) != len(manifest):
        raise NcuParseError(
            f"ncu captured {len(windows)} window(s) but the child recorded {len(manifest)}; cannot attribute kernels"
        )
    return dict(zip(manifest, windows, strict=True))


def read_manifest(path: Path) -> list[WindowKey]:
    """The (test id, step, occurrence) of each window the child opened, in order."""
    return [key for key, _ in manifest_entries(path)]


#: Manifest keys that name the window; the others are facts about it.
_KEY_FIELDS = ("node_id", "test", "step", "occurrence")


def manifest_entries(path: Path) -> list[tuple[WindowKey, dict[str, Any]]]:
    """Each window the child opened, in order: its key and the facts the child added (what it profiled)."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            test = entry.get("test") or entry["node_id"]
            facts = {k: v for k, v in entry.items() if k not in _KEY_FIELDS}
            entries.append(((str(test), str(entry["step"]), int(entry["occurrence"])), facts))
    return entries


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

    ``options``: :func:`start_session`'s ``invocation_dir``, ``inifile``, ``parent_args`` and ``keys``.
    """
    return start_session(ncu, node_ids, backend, rootdir, csv_path, xdist, **options).finish(timeout)


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
) -> PendingSession:
    """Start the ncu child of :func:`capture_session`; ``gated``: it starts up (ncu, Python, imports, collection,
    CUDA context) and then waits until :meth:`PendingSession.release` (or :meth:`~PendingSession.discard`), so its
    start-up overlaps the parent's measuring of the tests before the first ncu test.

    The child runs where the parent was started (``invocation_dir``, default ``rootdir``: ``python -m pytest``
    puts it on ``sys.path``, as it did for the parent) with the parent's rootdir, ini file and plugin options.
    ``keys``: each node id's :func:`ncu_test_key` (the child is given those; without them, the node ids).
    ``full_report``: also keep ncu's ``--set full`` report of the windows there (``gpuperf_ncu_full_report``).
    """
    if not os.access(ncu, os.X_OK):  # the guard would start, then fail to run it: say why here
        raise NcuUnavailable(f"cannot start ncu ({ncu}): not an executable file")
    keys = dict(keys or {})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    csv_path.unlink(missing_ok=True)
    pending = PendingSession(make_pool_dir("ncu"), csv_path, list(node_ids), keys, full_report=full_report)
    if full_report is not None:
        full_report.unlink(missing_ok=True)
    env = {**os.environ, ENV_MANIFEST: str(pending.path(MANIFEST))}
    if gated:
        env.update({GATE_ENV: str(pending.path(GATE)), GATE_PARENT_ENV: str(os.getpid())})
    selection = [keys.get(n, n) for n in node_ids]
    pending.command = ncu_prefix(ncu, csv_path, full_report) + child_pytest_args(
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
    command: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    #: Where ncu writes its ``--set full`` report (None: not asked for).
    full_report: Path | None = None
    #: perf_counter seconds when the child was told to run (0.0: not yet).
    released_at: float = 0.0

    def path(self, name: str) -> Path:
        """A file of the child's folder (:data:`MANIFEST`, :data:`GATE`, :data:`STDOUT`, :data:`STDERR`)."""
        return self.scratch / name

    def release(self) -> None:
        """Let the child run its tests (it may still be starting up; it runs as soon as it is ready)."""
        if not self.released_at:
            self.released_at = time.perf_counter()
            FileGate(self.path(GATE)).open(GO)

    def finish(self, timeout: float) -> SessionCapture:
        """Release the child, wait for it (``timeout`` seconds from now) and parse what it captured.

        The capture's ``wall_s`` is the wait from the release on: what the parent's tests paid for it."""
        self.release()
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._stop()
            raise NcuUnavailable(self._overrun(timeout)) from None
        finally:
            output = self._output()
            entries = manifest_entries(self.path(MANIFEST))
            pids = [facts.pop("pid", None) for _, facts in entries]  # the window's process, not a fact to show
            remove_pool_dir(self.scratch)
        report = self.full_report if self.full_report is not None and self.full_report.exists() else None
        if report is not None:
            output += "\n" + import_report(self.command[0], report)  # the rows, when the log held none
        wall = time.perf_counter() - self.released_at
        keys = [key for key, _ in entries]
        session = parse_session(self.csv_path, output, keys, wall, self.command, self.tests, pids)
        session.keys, session.facts, session.report = self.keys, dict(entries), report
        session.output_tail = _tail(output, 3)
        return session

    def _overrun(self, timeout: float) -> str:
        """Why the session was stopped: its budget, how far the child got, and ncu's own last words."""
        windows = read_manifest(self.path(MANIFEST))
        done = sorted({test.rsplit("/", 1)[-1] for test, _, _ in windows})
        last_words = _tail(self._output(), 3) or "nothing"
        return (
            f"the ncu session of {len(self.tests)} test(s) ran past its {timeout:.0f} s budget (ini key "
            f"gpuperf_ncu_timeout) and was stopped; windows captured: {', '.join(done) or 'none'} (ncu replays each "
            f"kernel of a window, so a step of many kernels takes long); ncu's last words: {last_words}"
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


def parse_session(
    csv_path: Path,
    output: str,
    manifest: list[WindowKey],
    wall: float,
    command: list[str],
    tests: list[str],
    pids: Sequence[object] = (),
) -> SessionCapture:
    """Parse the child's CSV (the log file, else its stdout) into windows (``pids``: each window's process, see
    :func:`split_windows`); NcuUnavailable with ncu's reason."""
    log_text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.exists() else ""
    everything = f"{log_text}\n{output}"
    reason = unavailable_reason(everything)
    if reason:
        raise NcuUnavailable(f"ncu cannot read GPU counters here: {reason}")
    source = log_text if any(r and r[0] == "ID" for r in csv_rows(log_text)) else output
    try:
        kernels = parse_raw(source, str(csv_path))
        windows = split_windows(kernels, manifest, pids)
    except NcuParseError as exc:
        raise NcuUnavailable(f"ncu printed no usable CSV ({exc}); output tail: {_tail(everything)}") from None
    if source is not log_text:
        csv_path.write_text("\n".join(line for line in source.splitlines() if line.startswith('"')), encoding="utf-8")
    if not windows:
        error = unavailable_reason(everything, any_error=True)
        raise NcuUnavailable(f"ncu profiled no kernels: {error or _tail(everything)}")
    return SessionCapture(windows, csv_path, wall, command, tests)


def _tail(text: str, lines: int = 6) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)
