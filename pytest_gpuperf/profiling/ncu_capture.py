"""Nsight Compute capture of measured steps: every ncu test of a session in ONE child pytest under ncu.

ncu's own start-up and the child's CUDA initialisation cost 12-17 s on an H200, far more
than the kernels, so they are paid once per session:

* parent side (:func:`capture_session`): run ``ncu --profile-from-start off --clock-control
  none --metrics <SOL> --csv --page raw --print-units base -- python -m pytest <ids...>``
  over every selected ncu test, with :data:`ENV_MANIFEST` naming a manifest file;
* child side (:func:`bracket_step`, called for each ``measure()`` in the child): after the
  child's short warm-up and measuring, one call of the step runs between
  ``cudaProfilerStart()`` and ``cudaProfilerStop()`` (its own capture window), opened by a
  one-thread marker kernel (``torch.cuda._sleep``, ncu shows it as ``spin_kernel``), and
  the window's (test id, step, occurrence) is appended to the manifest;
* the parent parses the CSV once and cuts the kernel list at the markers: the n-th window
  is the manifest's n-th line (:func:`split_windows`).

ncu missing, or unable to read the GPU's counters (``ERR_NVGPUCTRPERM``,
``LibraryNotLoaded`` ...), raises :class:`NcuUnavailable`; the caller skips the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_gpuperf.profiling.ncu_parse import (
    SOL_METRICS,
    KernelRecord,
    NcuParseError,
    csv_rows,
    parse_raw,
    unavailable_reason,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend

ENV_MANIFEST = "GPUPERF_NCU_MANIFEST"
#: Set for a gated child (:func:`start_session`): the file it waits for before running its tests, and the
#: parent's pid (a gone parent ends the wait).
GATE_ENV = "GPUPERF_NCU_GATE"
GATE_PARENT_ENV = "GPUPERF_NCU_PARENT"
GATE_POLL_SECONDS = 0.02
#: How long a discarded child may take to leave before it is killed.
DISCARD_WAIT_SECONDS = 5.0
#: The marker kernel that opens each capture window (``torch.cuda._sleep``).
MARKER_KERNEL = "spin_kernel"
DEFAULT_TIMEOUT = 300.0

WindowKey = tuple[str, str, int]


class NcuUnavailable(Exception):
    """ncu cannot profile here; ``str(exc)`` is the reason shown on the skipped test."""


@dataclass
class NcuCapture:
    """Kernels ncu profiled in one step's window, and where the session's CSV was kept."""

    kernels: list[KernelRecord]
    csv_path: Path
    wall_s: float
    command: list[str]


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
        return NcuCapture(self.windows[found], self.csv_path, self.cost_per_test, self.command)

    @property
    def cost_per_test(self) -> float:
        """Wall seconds of the ncu child divided by the tests it captured."""
        return self.wall_s / max(1, len(self.tests))


def find_ncu() -> str | None:
    """Path of the ``ncu`` executable (``$GPUPERF_NCU`` first, then ``PATH``), or None."""
    explicit = os.environ.get("GPUPERF_NCU")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("ncu")


def ncu_prefix(ncu: str, log_file: Path) -> list[str]:
    """The ncu command line that profiles only the profiler-start/stop windows, with real clocks."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(SOL_METRICS),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        str(log_file),
    ]


def ncu_test_key(path: Path | str, node_id: str) -> str:
    """A test's name that does not depend on the rootdir: its file's absolute path, then the rest of its node id.

    The parent selects the child's tests by it and both sides name capture windows by it. A node id alone does
    not do: a file outside the rootdir has an empty path part (``::test_x[name-cuda]`` under pytest 9), which
    selects nothing in the child, and a child that found another rootdir names the same test differently.
    """
    _, sep, rest = node_id.partition("::")
    return os.path.normpath(str(path)) + sep + rest


#: Options of the parent's command line that decide what the child collects and how (value-taking ones).
FORWARDED_WITH_VALUE = ("-p", "-c", "--config-file", "-o", "--override-ini", "--import-mode", "--confcutdir")
#: Flags of the parent's command line that the child needs too.
FORWARDED_FLAGS = ("--noconftest",)


def forwarded_options(args: Sequence[str]) -> list[str]:
    """The parent's plugin, ini, import-mode and conftest options (``-p X``, ``-o k=v``, ``--import-mode=...``)."""
    kept: list[str] = []
    index = 0
    while index < len(args):
        arg = str(args[index])
        name, eq, _ = arg.partition("=")
        if arg in FORWARDED_FLAGS:
            kept.append(arg)
        elif arg in FORWARDED_WITH_VALUE and index + 1 < len(args):
            kept += [arg, str(args[index + 1])]
            index += 1
        elif eq and name in FORWARDED_WITH_VALUE and name.startswith("--"):
            kept.append(arg)
        elif arg[:2] in ("-p", "-o", "-c") and len(arg) > 2 and not arg.startswith("--"):
            kept.append(arg)
        index += 1
    return kept


def child_pytest_args(
    selection: Sequence[str],
    backend: str,
    baselines_dir: Path,
    xdist: bool,
    rootdir: Path | None = None,
    inifile: Path | None = None,
    parent_args: Sequence[str] = (),
) -> list[str]:
    """A short ``--gpuperf`` run of the tests: just enough warm-up for each window to be representative.

    ``selection``: the tests as :func:`ncu_test_key` (absolute file path + the rest of the id), so the child
    collects them from any working directory (a file outside the rootdir, a parametrized id, a run the parent
    selected with ``-k``); ``rootdir``/``inifile``: the parent's, so the child's ids, conftests and ini options
    are the parent's too; ``parent_args``' plugin, ini and import options come along (:func:`forwarded_options`).
    """
    args = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", "--gpuperf"]
    if rootdir is not None:
        args += ["--rootdir", str(rootdir)]
    if inifile is not None and not any(a in ("-c", "--config-file") or a.startswith("-c") for a in parent_args):
        args += ["-c", str(inifile)]
    args += forwarded_options(parent_args)
    args += ["--gpuperf-backend", backend, "-o", "gpuperf_max_time=0.05", "-o", "gpuperf_min_samples=1"]
    args += ["-o", "gpuperf_no_confirm=true", "-o", f"gpuperf_baselines={baselines_dir}"]
    if xdist:
        args += ["-n", "0"]
    return args


def split_windows(
    kernels: Sequence[KernelRecord], manifest: Sequence[WindowKey]
) -> dict[WindowKey, list[KernelRecord]]:
    """Cut ncu's kernel list at the marker kernels: the n-th window belongs to the manifest's n-th entry.

    Raises :class:`NcuParseError` when the markers and the manifest disagree (the
    windows cannot be attributed then).
    """
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
    if not path.exists():
        return []
    keys = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            test = entry.get("test") or entry["node_id"]
            keys.append((str(test), str(entry["step"]), int(entry["occurrence"])))
    return keys


def capture_session(
    ncu: str,
    node_ids: Sequence[str],
    backend: str,
    rootdir: Path,
    csv_path: Path,
    timeout: float = DEFAULT_TIMEOUT,
    xdist: bool = False,
    invocation_dir: Path | None = None,
    inifile: Path | None = None,
    parent_args: Sequence[str] = (),
    keys: dict[str, str] | None = None,
) -> SessionCapture:
    """Run ``node_ids`` in one child pytest under ncu; every ``measure()`` there is one capture window.

    The child runs where the parent was started (``invocation_dir``, default ``rootdir``: ``python -m pytest``
    puts it on ``sys.path``, as it did for the parent) with the parent's rootdir, ini file and plugin options.
    ``keys``: each node id's :func:`ncu_test_key` (the child is given those; without them, the node ids).
    """
    pending = start_session(
        ncu, node_ids, backend, rootdir, csv_path, xdist, invocation_dir, inifile, parent_args, keys
    )
    return pending.finish(timeout)


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
) -> PendingSession:
    """Start the ncu child of :func:`capture_session`; ``gated``: it starts up (ncu, Python, imports, collection,
    CUDA context) and then waits until :meth:`PendingSession.release` (or :meth:`~PendingSession.discard`), so its
    start-up overlaps the parent's measuring of the tests before the first ncu test."""
    from pytest_gpuperf.distributed.guard import popen_guarded

    if not os.access(ncu, os.X_OK):  # the guard would start, then fail to run it: say why here
        raise NcuUnavailable(f"cannot start ncu ({ncu}): not an executable file")
    keys = dict(keys or {})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    if csv_path.exists():
        csv_path.unlink()
    scratch = Path(tempfile.mkdtemp(prefix="gpuperf-ncu-"))
    pending = PendingSession(scratch, csv_path, list(node_ids), keys)
    env = {**os.environ, ENV_MANIFEST: str(pending.manifest)}
    if gated:
        env.update({GATE_ENV: str(pending.gate), GATE_PARENT_ENV: str(os.getpid())})
    selection = [keys.get(n, n) for n in node_ids]
    pending.command = ncu_prefix(ncu, csv_path) + child_pytest_args(
        selection, backend, scratch, xdist, rootdir, inifile, parent_args
    )
    try:
        with open(pending.stdout, "wb") as out, open(pending.stderr, "wb") as err:
            pending.proc = popen_guarded(
                pending.command,
                env=env,
                cwd=invocation_dir or rootdir,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise NcuUnavailable(f"cannot start ncu ({ncu}): {exc}") from None
    if not gated:
        pending.release()
    return pending


@dataclass
class PendingSession:
    """A started ncu child: :meth:`release` lets a gated one run, :meth:`finish` waits for its capture."""

    scratch: Path
    csv_path: Path
    tests: list[str]
    keys: dict[str, str]
    command: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    #: perf_counter seconds when the child was told to run (0.0: not yet).
    released_at: float = 0.0

    @property
    def manifest(self) -> Path:
        """The windows the child opened (:func:`bracket_step` appends to it)."""
        return self.scratch / "windows.jsonl"

    @property
    def gate(self) -> Path:
        """The file a gated child waits for: ``go`` or ``stop``."""
        return self.scratch / "gate"

    @property
    def stdout(self) -> Path:
        """The child's standard output (ncu's and pytest's)."""
        return self.scratch / "stdout.txt"

    @property
    def stderr(self) -> Path:
        """The child's standard error."""
        return self.scratch / "stderr.txt"

    def _open_gate(self, word: str) -> None:
        temporary = self.scratch / "gate.tmp"
        temporary.write_text(word, encoding="utf-8")
        os.replace(temporary, self.gate)

    def release(self) -> None:
        """Let the child run its tests (it may still be starting up; it runs as soon as it is ready)."""
        if not self.released_at:
            self.released_at = time.perf_counter()
            self._open_gate("go")

    def finish(self, timeout: float) -> SessionCapture:
        """Release the child, wait for it (``timeout`` seconds from now) and parse what it captured.

        The capture's ``wall_s`` is the wait from the release on: what the parent's tests paid for it."""
        self.release()
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._stop()
            raise NcuUnavailable(
                f"the ncu session of {len(self.tests)} test(s) ran past {timeout:.0f} s; "
                "raise the ini key gpuperf_ncu_timeout"
            ) from None
        finally:
            output = self._output()
            manifest = read_manifest(self.manifest)
            shutil.rmtree(self.scratch, ignore_errors=True)
        wall = time.perf_counter() - self.released_at
        session = parse_session(self.csv_path, output, manifest, wall, self.command, self.tests)
        session.keys = self.keys
        session.output_tail = _tail(output, 3)
        return session

    def discard(self) -> None:
        """The session ended before any test needed the capture: tell the child to leave, and make sure it did."""
        if self.proc is None or self.released_at:
            return
        self._open_gate("stop")
        try:
            self.proc.wait(DISCARD_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        self._stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop(self) -> None:
        from pytest_gpuperf.distributed.guard import stop_guarded

        if self.proc is not None:
            stop_guarded(self.proc)

    def _output(self) -> str:
        texts = [
            p.read_text(encoding="utf-8", errors="replace") if p.exists() else "" for p in (self.stdout, self.stderr)
        ]
        return "\n".join(texts)


def wait_for_gate(gate: Path, parent: int, poll: float = GATE_POLL_SECONDS) -> bool:
    """In a gated child: wait until the parent opens the gate; True for "go", False for "stop" or a gone parent."""
    while True:
        try:
            return gate.read_text(encoding="utf-8").strip() == "go"
        except OSError:
            pass
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        time.sleep(poll)


def parse_session(
    csv_path: Path, output: str, manifest: list[WindowKey], wall: float, command: list[str], tests: list[str]
) -> SessionCapture:
    """Parse the child's CSV (the log file, else its stdout) into windows; NcuUnavailable with ncu's reason."""
    log_text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.exists() else ""
    everything = f"{log_text}\n{output}"
    reason = unavailable_reason(everything)
    if reason:
        raise NcuUnavailable(f"ncu cannot read GPU counters here: {reason}")
    source = log_text if any(r and r[0] == "ID" for r in csv_rows(log_text)) else output
    try:
        kernels = parse_raw(source, str(csv_path))
        windows = split_windows(kernels, manifest)
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


def child_manifest() -> Path | None:
    """In a child started by :func:`capture_session`: the manifest to append windows to; None elsewhere."""
    path = os.environ.get(ENV_MANIFEST)
    return Path(path) if path else None


def bracket_step(
    backend: Backend, step: Callable[[], object], manifest: Path, key: WindowKey, test: str | None = None
) -> None:
    """One capture window: a marker kernel and one call of ``step`` between profiler start and stop."""
    import torch

    backend.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    try:
        torch.cuda._sleep(1)
        step()
        backend.synchronize()
    finally:
        torch.cuda.cudart().cudaProfilerStop()
    with manifest.open("a", encoding="utf-8") as handle:
        entry = {"node_id": key[0], "step": key[1], "occurrence": key[2]}
        if test is not None:
            entry["test"] = test  # the rootdir-independent name (ncu_test_key) the parent looks the window up by
        handle.write(json.dumps(entry) + "\n")
