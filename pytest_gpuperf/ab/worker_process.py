"""One A/B worker process: how a side starts it (:class:`Side`), and the started process waiting for its turn.

A gated worker starts up (Python, pytest, imports, collection, CUDA context), prints :data:`READY_LINE` and waits
at its gate, its stdin (:class:`pytest_gpuperf.procs.gate.PipeGate`), for "go" (run the tests its select file
names) or anything else (exit); it prints :data:`DONE_LINE` once its results file is written
(:mod:`pytest_gpuperf.ab.worker_plugin`).
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_gpuperf.procs.gate import GO, PipeGate
from pytest_gpuperf.procs.guard import stop_guarded


@dataclass
class Side:
    """How to start a worker of one side: A (REF's worktree) or B (the working tree)."""

    name: str
    root: Path
    cwd: Path
    rootdir: Path
    env: dict[str, str]
    scope: list[str]


#: Set in a worker's environment: it waits on stdin after collecting, for "go" (run) or anything else (exit).
GATE_ENV = "GPUPERF_AB_GATE"
#: Set in a worker's environment: the folder of the floor's modules (this install's ``pytest_gpuperf/procs``) the
#: worker plugin loads by path (the plugin's docstring says why).
FLOOR_ENV = "GPUPERF_AB_FLOOR"
#: The line a worker prints once its results file is written (it may take a while longer to exit).
DONE_LINE = "GPUPERF_AB_DONE"
#: The line a gated worker prints once it has started up (collected, CUDA context made) and waits.
READY_LINE = "GPUPERF_AB_READY"


@dataclass
class WarmWorker:
    """A started worker process waiting to be told its tests; its output is read by a thread as it comes."""

    side: Side
    pair: int
    proc: subprocess.Popen[str]
    select: Path
    out: Path
    lines: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)
    #: perf_counter seconds when it was started, said ready, was told to run, and said done (0.0: not yet).
    spawned_at: float = field(default_factory=time.perf_counter)
    ready_at: float = 0.0
    released_at: float = 0.0
    done_at: float = 0.0

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, name=f"gpuperf-ab-{self.side.name}{self.pair}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip() == READY_LINE:
                self.ready_at = time.perf_counter()
                self.ready.set()
            elif line.strip() == DONE_LINE:
                self.done_at = time.perf_counter()
                self.done.set()
        self.ready.set()
        self.done.set()  # end of output: it exited

    def output(self) -> str:
        """What the worker printed so far."""
        return "".join(line for line in self.lines if line.strip() not in (DONE_LINE, READY_LINE))

    def wait_ready(self, timeout: float) -> None:
        """Wait until it has started up and waits for its turn (or exited)."""
        self.ready.wait(timeout)

    def release(self, timeout: float) -> bool:
        """Tell it to run and wait for its results (not for its exit); False when it ran past ``timeout``."""
        self.released_at = time.perf_counter()
        PipeGate(self.proc.stdin).open(GO)
        if self.done.wait(timeout):
            return True
        self.kill()
        return False

    def wait(self, timeout: float) -> None:
        """Wait for the process to exit (killed after ``timeout``) and for its output."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(5.0)

    def timeline(self, origin: float) -> dict[str, float]:
        """Seconds from ``origin`` (the A/B run's start) to its start, ready, go and done (the ones that happened)."""
        moments = {"spawned": self.spawned_at, "ready": self.ready_at, "go": self.released_at, "done": self.done_at}
        return {name: round(at - origin, 3) for name, at in moments.items() if at > 0.0}

    def kill(self) -> None:
        """Kill the worker and everything it started (its guard's group), and reap it."""
        stop_guarded(self.proc)
