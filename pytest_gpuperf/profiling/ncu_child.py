"""The ncu child's side (the pytest process ncu runs): wait at the gate, then one capture window per ``measure()``.

A prestarted child waits at its gate file (:mod:`pytest_gpuperf.procs.gate`) after collecting. Each ``measure()``
there is replaced (``pytest_gpuperf_measure_instead``) by a warm call, a ranking call and one capture window
(:func:`capture_window`): the window is opened by a one-thread marker kernel (``torch.cuda._sleep``, ncu shows it as
:data:`MARKER_KERNEL`), profiles the step's top operations (:mod:`.ncu_select`) and is listed, with what was chosen,
in the manifest the parent names in :data:`ENV_MANIFEST`. A window the session's budget cannot pay for is listed as
not captured (:mod:`.ncu_budget`); once the budget is nearly spent the child stops its session, so that ncu writes
the windows it captured.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_gpuperf.procs.gate import wait_on_file
from pytest_gpuperf.profiling.ncu_budget import Budget, write_pid
from pytest_gpuperf.profiling.ncu_kernels import DEFAULT_MAX_KERNELS
from pytest_gpuperf.profiling.ncu_select import (
    DEFAULT_TOP_OPS,
    Caps,
    Selection,
    rank_step,
    windowed_call,
)

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend
    from pytest_gpuperf.context import TestContext

ENV_MANIFEST = "GPUPERF_NCU_MANIFEST"
#: Set for a gated child (:func:`~pytest_gpuperf.profiling.ncu_capture.start_session`): the file it waits for
#: before running its tests, and the parent's pid (a gone parent ends the wait).
GATE_ENV = "GPUPERF_NCU_GATE"
GATE_PARENT_ENV = "GPUPERF_NCU_PARENT"
#: The marker kernel that opens each capture window (``torch.cuda._sleep``).
MARKER_KERNEL = "spin_kernel"

WindowKey = tuple[str, str, int]


#: In a gated child: wait until the parent opens the gate file; True for "go", False for "stop" or a gone parent.
wait_for_gate = wait_on_file


def child_manifest() -> Path | None:
    """In the ncu child: the manifest to append windows to (the parent names it); None elsewhere."""
    path = os.environ.get(ENV_MANIFEST)
    return Path(path) if path else None


#: The calls of the step a capture window makes: the warm call, the ranking call, the window's call. The other ranks
#: of a distributed step make as many, so that every rank enters each collective equally often.
WINDOW_CALLS = 3


def capture_window(
    backend: Backend,
    step: Callable[[], object],
    manifest: Path,
    key: WindowKey,
    test: str | None,
    caps: int | Caps,
    peers: bool = False,
    budget: Budget | None = None,
) -> str:
    """What a ``measure()`` does in the child: a warm call, a ranking call, then the one capture window
    (:data:`WINDOW_CALLS` calls of the step). Returns "" or why the window was not captured (the budget).

    Nothing is sampled here: the measuring loop (warm-up, power warm-up, adaptive sampling) ran in the parent, and
    under ncu every launch costs more, so the child's time is its start-up and one window per step. ``peers``: the
    step runs on several ranks, whose collectives the window leaves out (:func:`.ncu_select.around`); they make
    their calls whatever happens here, so this rank makes as many."""
    budget = budget or Budget(None)
    started = time.perf_counter()
    stop = budget.stop_reason()
    if stop:
        if peers:
            follow_window(backend, step)
        note_skipped(manifest, key, test, stop)
        return stop
    step()
    backend.synchronize()
    selection = rank_step(step, caps, _event, _event_seconds, backend.synchronize, peers)
    too_long = budget.window_reason(selection.kernels)
    if too_long:
        if peers:
            step()
            backend.synchronize()
        note_skipped(manifest, key, test, too_long)
        return too_long
    bracket_step(backend, step, manifest, key, test, selection, started)
    budget.learn(time.perf_counter() - started, selection.kernels)
    return ""


def note_skipped(manifest: Path, key: WindowKey, test: str | None, reason: str) -> None:
    """List a window that was not opened, with why (no marker kernel ran for it)."""
    entry: dict[str, object] = {"node_id": key[0], "step": key[1], "occurrence": key[2], "not_captured": reason}
    if test is not None:
        entry["test"] = test
    with manifest.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def follow_window(backend: Backend, step: Callable[[], object]) -> None:
    """A rank other than 0 while rank 0 opens its window: the same :data:`WINDOW_CALLS` calls, nothing profiled."""
    for _ in range(WINDOW_CALLS):
        step()
        backend.synchronize()


@dataclass
class RankWindow:
    """The ncu child's ``measure()`` on the ranks of a distributed test (a picklable ``MeasureInstead``, sent with
    the test's task): rank 0 opens the step's capture window, listed under the child's name of the test, the other
    ranks make the same calls.

    ncu (``--target-processes all``) follows the child's rank launcher into every rank, but only rank 0 starts the
    profiler. On several ranks its window leaves the collectives out: ncu replays each profiled kernel alone, and a
    collective's peers would not join its replays."""

    manifest: str
    test: str | None
    caps: Caps | int
    seen: dict[str, int] = field(default_factory=dict)

    def __call__(self, context: TestContext, step: Callable[[], object], name: str) -> bool:
        """Run the step's window (True); a backend other than CUDA is measured as usual (False)."""
        if context.backend.name != "cuda":
            return False
        rank, world_size = _rank_and_world()
        if rank != 0:
            follow_window(context.backend, step)
            return True
        index = self.seen.get(name, 0)
        self.seen[name] = index + 1
        key = (context.node_id, name, index)
        manifest = Path(self.manifest)
        budget = Budget.of(manifest.parent)
        capture_window(context.backend, step, manifest, key, self.test, self.caps, world_size > 1, budget)
        return True


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and world size in the default process group ((0, 1) when none is joined)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _event() -> object:
    """A CUDA event recorded now on the current stream: a mark of the ranking call's clock."""
    import torch

    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _event_seconds(begin: object, end: object) -> float:
    """Device seconds between two recorded events (after a synchronize)."""
    return float(begin.elapsed_time(end)) / 1e3  # type: ignore[attr-defined]


def bracket_step(
    backend: Backend,
    step: Callable[[], object],
    manifest: Path,
    key: WindowKey,
    test: str | None = None,
    selection: Selection | None = None,
    started: float | None = None,
) -> None:
    """One capture window: a marker kernel, then one call of ``step`` with the profiler on for the whole call or
    only around the chosen operations (``selection``); the window is appended to the manifest with the child's
    seconds for it since ``started`` (default: since the window opened), ncu's replays included."""
    import torch

    cudart = torch.cuda.cudart()
    selection = selection or Selection(frozenset(), reason="no ranking")
    entry: dict[str, object] = {"node_id": key[0], "step": key[1], "occurrence": key[2], **selection.facts()}
    entry["pid"] = os.getpid()  # ncu's Process ID of the window's kernels (a rank's are not the child's)
    if test is not None:
        entry["test"] = test  # the rootdir-independent name (ncu_test_key) the parent looks the window up by
    backend.synchronize()
    started = time.perf_counter() if started is None else started
    cudart.cudaProfilerStart()
    try:
        torch.cuda._sleep(1)
        if selection.whole_step:
            step()
            backend.synchronize()
    finally:
        cudart.cudaProfilerStop()
    if not selection.whole_step:  # the marker opened the window; the profiler runs only around the chosen ops
        entry["differing_ops"] = windowed_call(step, selection, cudart.cudaProfilerStart, cudart.cudaProfilerStop)
        backend.synchronize()
    entry["window_s"] = round(time.perf_counter() - started, 3)
    with manifest.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


class NcuChildExtension:
    """In the child process ncu runs: each ``measure()`` is one capture window (nothing is timed), listed in the
    manifest."""

    def __init__(self, manifest: Path, top_ops: int = DEFAULT_TOP_OPS, max_kernels: int = DEFAULT_MAX_KERNELS) -> None:
        self.manifest = manifest
        self.caps = Caps(top_ops, max_kernels)
        self._seen: dict[tuple[str, str], int] = {}
        #: node id -> :func:`~pytest_gpuperf.profiling.ncu_command.ncu_test_key` of the collected tests.
        self._keys: dict[str, str] = {}
        self._session: pytest.Session | None = None
        #: The session's deadline, read once the parent released this child (no gate: at collection).
        self.budget = Budget(None)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Name each collected test the way the parent does: by its file's absolute path, not its node id."""
        from pytest_gpuperf.profiling.ncu_command import ncu_test_key

        self._keys = {item.nodeid: ncu_test_key(item.path, item.nodeid) for item in session.items}
        # Distributed tests last: their ranks start under ncu (new processes, a process group), the slowest windows
        # to reach; every single-process test's window is then captured before any of theirs within the budget.
        session.items.sort(key=lambda item: item.get_closest_marker("gpuperf_distributed") is not None)
        self._session = session
        if self.manifest.parent.is_dir():
            write_pid(self.manifest.parent)
        gate = os.environ.get(GATE_ENV)
        if gate and not self._wait_for_turn(Path(gate)):
            session.items[:] = []
            pytest.exit("ncu child not needed: the parent's session ended before its first ncu test", returncode=0)
        self.budget = Budget.of(self.manifest.parent)

    @staticmethod
    def _wait_for_turn(gate: Path) -> bool:
        """A prestarted child: make the CUDA context now (while the parent still measures), then wait to run."""
        try:
            import torch

            if torch.cuda.is_available():
                torch.empty(1, device="cuda")
        except Exception:  # noqa: BLE001 - a failing CUDA start shows up again in the tests, with its reason
            pass
        return wait_for_gate(gate, int(os.environ[GATE_PARENT_ENV]))  # start_session sets both variables

    def pytest_gpuperf_rank_measure_instead(self, item: pytest.Item) -> RankWindow:
        """The hook: a distributed test's ranks open their windows as this process would (:class:`RankWindow`)."""
        return RankWindow(str(self.manifest), self._keys.get(item.nodeid), self.caps)

    def pytest_gpuperf_measure_instead(
        self, context: TestContext, step: Callable[[], object], name: str
    ) -> bool | None:
        """The hook: a CUDA step gets its capture window in place of the measuring loop (see
        :func:`capture_window`); any other backend is left to the core."""
        if context.backend.name != "cuda":
            return None
        index = self._seen.get((context.node_id, name), 0)
        self._seen[(context.node_id, name)] = index + 1
        key = (context.node_id, name, index)
        test = self._keys.get(context.node_id)
        self.budget.reread(self.manifest.parent)
        skipped = capture_window(context.backend, step, self.manifest, key, test, self.caps, budget=self.budget)
        if skipped and self.budget.stop_reason():
            if self._session is not None:  # the tests left are not run: the child ends, and ncu writes its CSV
                self._session.shouldstop = skipped
            pytest.skip(skipped)
        return True
