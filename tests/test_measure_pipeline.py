"""One ``measure()`` call as a chain of values: one plan, each probe once, the sync count held for the graph capture,
a confirmation timed again with the same plan."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.backends.base import Backend
from pytest_gpuperf.context import build_context
from pytest_gpuperf.fixture import GpuPerf
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.measuring.pipeline import IN_PROCESS, Stages
from pytest_gpuperf.timing import MeasureConfig
from pytest_gpuperf.timing.cuda.host_syncs import (
    HOST_SYNC_MESSAGE,
    PROTOTYPE_NOTICE,
    count_cuda_syncs,
    host_syncs_known,
    known_host_syncs,
)
from tests.test_judging import NODE, FakeBackend, settings, time_entry

FAST = MeasureConfig(max_time=0.05, min_samples=3, warmup_time=0.0, warmup_calls=2, target_precision=0.5)


class ProbedBackend(FakeBackend, Backend):
    """A device-free backend that counts its probes and sees, while timing, the sync count held for the step."""

    runs_torch = False

    def __init__(self) -> None:
        self.probes: Counter[str] = Counter()
        self.held: set[int | None] = set()

    def availability(self) -> str | None:
        return None

    def synchronize(self) -> None: ...

    def device(self) -> None:
        return None

    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        self.probes["peak_memory"] += 1
        step()
        return 4096

    def memory_note(self) -> str:
        return "fake allocator"

    def count_host_syncs(self, step: Callable[[], object]) -> int | None:
        self.probes["host_syncs"] += 1
        step()
        return 2

    def time_block(self, step: Callable[[], object], iters: int) -> float:
        self.held.add(host_syncs_known(step))
        self.probes["timed_blocks"] += 1
        for _ in range(iters):
            step()
        return 1e-3 * iters


def _handle(tmp_path: Path, entries: dict[str, Any], **kwargs: Any) -> tuple[GpuPerf, ProbedBackend, Judging]:
    backend = ProbedBackend()
    judging = Judging(settings(tmp_path, measure=FAST), FixedBaselines(entries))
    context = build_context(NODE, backend, {})  # type: ignore[arg-type]
    return GpuPerf(context, judging, **kwargs), backend, judging


def test_the_plan_is_made_once_and_each_probe_calls_the_step_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_gpuperf.judging import service

    rule_calls: list[tuple[str, Any]] = []
    rule = service.judged_timing_metric
    monkeypatch.setattr(service, "judged_timing_metric", lambda n, i: rule_calls.append((n, i)) or rule(n, i))
    handle, backend, judging = _handle(tmp_path, {})
    lookups: list[str] = []
    entry = judging.entry
    monkeypatch.setattr(judging, "entry", lambda c, name: lookups.append(name) or entry(c, name))
    calls = [0]

    def step() -> None:
        calls[0] += 1

    measurement = handle.measure(step, items=8, unit="rows")
    assert rule_calls == [("step", 8)] and lookups == ["step.throughput"]  # the judged-metric rule asked once
    assert backend.probes["peak_memory"] == 1 and backend.probes["host_syncs"] == 1
    assert backend.held == {2}  # the timing stage saw the probes' sync count for this very step
    assert measurement["host_syncs"].value == 2 and measurement["peak_memory"].value == 4096
    assert measurement["peak_memory"].extra == {"note": "fake allocator"}
    assert measurement["throughput"].judged and not measurement["time"].judged
    assert host_syncs_known(step) is None  # held only while the step is timed
    names = [v.metric.name for v in judging.verdicts[NODE]]
    assert names[:2] == ["step.time", "step.throughput"] and names[-2:] == ["step.host_syncs", "step.peak_memory"]


def test_memory_false_makes_the_warm_call_and_the_sync_check_only(tmp_path: Path) -> None:
    handle, backend, _ = _handle(tmp_path, {})
    handle.measure(lambda: None, memory=False)
    assert backend.probes["peak_memory"] == 0 and backend.probes["host_syncs"] == 1
    assert "step.peak_memory" not in handle.measurements[0].metrics


@pytest.mark.parametrize("confirmed_elsewhere", [False, True])
def test_a_suspect_is_timed_again_with_the_same_plan_unless_a_fresh_process_confirms_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confirmed_elsewhere: bool
) -> None:
    plans: list[Any] = []
    time = Stages.time

    def recording(self: Stages, plan: Any, probes: Any) -> Any:
        plans.append(plan)
        return time(self, plan, probes)

    monkeypatch.setattr(Stages, "time", recording)
    handle, _, judging = _handle(tmp_path, {"step.time": time_entry(1e-4)}, confirmed_elsewhere=confirmed_elsewhere)
    handle.measure(lambda: None, memory=False)
    [verdict, *_] = judging.verdicts[NODE]
    assert verdict.metric.name == "step.time"
    if confirmed_elsewhere:
        assert len(plans) == 1 and verdict.status == "regression"  # the session confirms it after the body
    else:
        assert len(plans) == 2 and plans[1] is plans[0]
        assert verdict.status == "regression" and IN_PROCESS in verdict.message


def test_a_straddling_clock_band_is_left_to_a_fresh_process_never_timed_again_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: a clock band that straddled is decided by two fresh processes that agree; a second measurement in
    the same process says nothing about the process's own speed, so none is spent on it."""
    from dataclasses import replace

    plans: list[Any] = []
    time = Stages.time
    monkeypatch.setattr(Stages, "time", lambda self, plan, probes: plans.append(plan) or time(self, plan, probes))
    handle, _, judging = _handle(tmp_path, {"step.time": time_entry(1e-4)})
    judge = judging.judge

    def straddling(context: Any, metrics: list[Any]) -> list[Any]:
        return [
            replace(v, status="inconclusive", suspected="regression", doubt="clock") if v.status == "regression" else v
            for v in judge(context, metrics)
        ]

    monkeypatch.setattr(judging, "judge", straddling)
    handle.measure(lambda: None, memory=False)
    [verdict, *_] = judging.verdicts[NODE]
    assert len(plans) == 1 and verdict.status == "inconclusive" and verdict.doubt == "clock"


def test_without_gpuperf_the_step_runs_once_and_nothing_is_planned() -> None:
    backend = ProbedBackend()
    handle = GpuPerf(build_context(NODE, backend, {}))  # type: ignore[arg-type]
    calls = [0]
    measurement = handle.measure(lambda: calls.__setitem__(0, calls[0] + 1), name="fwd")
    assert calls == [1] and measurement.smoke and not backend.probes
    assert handle.measurements == [measurement]


def test_the_sync_check_counts_syncs_not_the_debug_modes_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    modes: list[Any] = []

    def set_mode(mode: Any) -> None:
        if not modes:  # torch gives its notice once per process, when the mode is first set
            warnings.warn(f"{PROTOTYPE_NOTICE} and does not yet detect all synchronizing operations", stacklevel=1)
        modes.append(mode)

    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def step() -> None:
        for _ in range(2):
            warnings.warn(f"{HOST_SYNC_MESSAGE} (Triggered internally at CUDAFunctions.cpp)", stacklevel=1)
        warnings.warn("an unrelated warning of the step", stacklevel=1)

    assert count_cuda_syncs(step) == 2 and modes == ["warn", 0]  # the previous mode is put back
    assert count_cuda_syncs(step) == 2


def test_a_held_sync_count_decides_the_graph_capture_without_calling_the_step() -> None:
    from pytest_gpuperf.timing.cuda.graph import capture

    def step() -> None:
        raise AssertionError("the capture called the step")

    with known_host_syncs(step, 1):
        assert host_syncs_known(step) == 1 and host_syncs_known(lambda: None) is None
        assert capture(step, 10) == (None, f"RuntimeError: {HOST_SYNC_MESSAGE}")
    with known_host_syncs(step, None):
        assert host_syncs_known(step) is None
    assert host_syncs_known(step) is None
