"""The judging service: one baseline lookup (with world size), one tolerance rule, one judged metric, the rank side."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_gpuperf.backends.fingerprint import baseline_filename
from pytest_gpuperf.baselines import BaselineFile
from pytest_gpuperf.baselines.recording import Recorder
from pytest_gpuperf.baselines.sources import FileBaselines
from pytest_gpuperf.baselines.update import metric_to_entry
from pytest_gpuperf.context import MarkerError, TestContext, build_context
from pytest_gpuperf.judging.collecting import CollectingJudging
from pytest_gpuperf.judging.service import FixedBaselines, Judging, judged_timing_metric
from pytest_gpuperf.results import KIND_CUSTOM, KIND_MEMORY, KIND_THROUGHPUT, KIND_TIME, Metric
from pytest_gpuperf.timing import MeasureConfig

NODE = "test_x.py::test_step[fake]"


class FakeBackend:
    """A device-free backend: a fixed fingerprint, GPU-like tolerances."""

    name = "fake"

    def fingerprint(self) -> dict[str, Any]:
        return {"backend": "fake", "device_name": "Fake GPU", "arch": "f1", "memory_gib": 1}

    def is_host_cpu(self) -> bool:
        return False


def settings(tmp_path: Path, **overrides: Any) -> SimpleNamespace:
    values = {
        "update": False,
        "strict": False,
        "confirm": True,
        "baselines_dir": tmp_path,
        "time_tolerance": 0.05,
        "memory_tolerance": 0.02,
        "host_tolerance": 0.25,
        "measure": MeasureConfig(),
    }
    values.update(overrides)
    return SimpleNamespace(**values, time_tolerance_for=lambda backend: values["time_tolerance"])


def files_by_world(entries_by_world: dict[int, dict[str, Any]]) -> Any:
    """A loader (as a git ref would give) holding one baseline file per world size."""
    backend = FakeBackend()

    def load(path: Path) -> BaselineFile | None:
        for world, entries in entries_by_world.items():
            fingerprint = {**backend.fingerprint(), "world_size": world}
            if path.name == baseline_filename(fingerprint):
                return BaselineFile(path, fingerprint, {NODE: entries})
        return None

    return load


def time_entry(value: float) -> dict[str, Any]:
    return {"value": value, "unit": "s", "better": "lower", "kind": "time", "samples": [value] * 5}


def test_the_baseline_entry_is_looked_up_by_fingerprint_and_world_size(tmp_path: Path) -> None:
    loader = files_by_world({1: {"step.time": time_entry(1.0)}, 2: {"step.time": time_entry(2.0)}})
    judging = Judging(settings(tmp_path), FileBaselines(settings(tmp_path), lambda: loader))  # type: ignore[arg-type]
    single = build_context(NODE, FakeBackend(), {}, world_size=1)  # type: ignore[arg-type]
    assert judging.entry(single, "step.time")["value"] == 1.0  # type: ignore[index]
    assert judging.entry(single.in_world(2), "step.time")["value"] == 2.0  # type: ignore[index]
    assert judging.entry(single.in_world(4), "step.time") is None
    recording = Judging(settings(tmp_path, update=True), FileBaselines(settings(tmp_path), lambda: loader), Recorder())  # type: ignore[arg-type]
    assert recording.entry(single, "step.time") is None  # recording plans without a baseline
    assert recording.entries(single)["step.time"]["value"] == 1.0  # ... but still reads (and checks) the file


def test_ranks_plan_against_the_entries_the_pytest_process_judges_with(tmp_path: Path) -> None:
    """The --gpuperf-baseline-ref / rank gap: the rank's service answers from the entries sent with the task."""
    from pytest_gpuperf.distributed.rank_runner import rank_judging
    from pytest_gpuperf.distributed.runner import build_task

    ref_loader = files_by_world({2: {"step.time": time_entry(7.0)}})  # the ref's file; the working tree has none
    judging = Judging(settings(tmp_path), FileBaselines(settings(tmp_path), lambda: ref_loader))  # type: ignore[arg-type]
    context = build_context(NODE, FakeBackend(), {}, world_size=2)  # type: ignore[arg-type]
    handle = SimpleNamespace(judging=judging, context=context)

    def body(gpuperf: Any) -> None: ...

    item = SimpleNamespace(
        cls=None,
        function=body,
        _fixtureinfo=SimpleNamespace(argnames=("gpuperf",)),
        funcargs={"gpuperf": handle},
        get_closest_marker=lambda name: None,
        module=SimpleNamespace(__name__="test_x", __file__=str(tmp_path / "test_x.py")),
        nodeid=NODE,
        config=SimpleNamespace(hook=SimpleNamespace(pytest_gpuperf_rank_measure_instead=lambda item: None)),
    )
    task = build_task(item, "fake")  # type: ignore[arg-type]
    assert task.baseline_entries == {"step.time": time_entry(7.0)}
    rank = rank_judging(task)
    assert isinstance(rank, CollectingJudging)
    assert rank.entry(build_context(NODE, FakeBackend(), {}, world_size=2), "step.time")["value"] == 7.0  # type: ignore[arg-type,index]


def test_tolerance_marker_per_metric_then_per_kind_per_backend_then_default(tmp_path: Path) -> None:
    judging = Judging(settings(tmp_path), FixedBaselines({}))
    plain = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    assert judging.tolerance(plain, "step.time", KIND_TIME) == 0.05
    assert judging.tolerance(plain, "step.peak_memory", KIND_MEMORY) == 0.02
    marked = build_context(
        NODE,
        FakeBackend(),  # type: ignore[arg-type]
        {"time_tolerance": {"fake": 0.3, "cuda": 0.1}, "tolerance": 0.5, "tolerances": {"step.throughput": 0.7}},
    )
    assert judging.tolerance(marked, "step.time", KIND_TIME) == 0.3
    assert judging.tolerance(marked, "step.throughput", KIND_THROUGHPUT) == 0.7
    assert judging.tolerance(marked, "step.peak_memory", KIND_MEMORY) == 0.5
    assert judging.tolerance(marked, "script.loss", KIND_CUSTOM) == 0.5


def test_one_place_decides_the_judged_timing_metric() -> None:
    assert judged_timing_metric("step", None) == ("step.time", KIND_TIME)
    assert judged_timing_metric("fwd", 64) == ("fwd.throughput", KIND_THROUGHPUT)


def test_informational_metrics_are_never_failing_and_strict_fails_missing_baselines(tmp_path: Path) -> None:
    entries = {"step.time": time_entry(1.0)}
    context = build_context(NODE, FakeBackend(), {"informational": {"fake": ("time",)}})  # type: ignore[arg-type]
    judging = Judging(settings(tmp_path, strict=True), FixedBaselines(entries))
    slow = Metric("step.time", 3.0, "s", "lower", KIND_TIME, samples=[3.0] * 5)
    missing = Metric("step.peak_memory", 10.0, "B", "lower", KIND_MEMORY)
    judging.store(context, judging.judge(context, [slow, missing]))
    statuses = [v.status for v in judging.verdicts[NODE]]
    assert statuses == ["info", "new"]
    [line] = judging.failure_lines(NODE)
    assert "no baseline" in line and "--gpuperf-strict" in line


def test_update_collects_entries_per_file_without_probe_fields(tmp_path: Path) -> None:
    recorder = Recorder()
    judging = Judging(settings(tmp_path, update=True), FixedBaselines({}, path=str(tmp_path / "f.yaml")), recorder)
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    metric = Metric("step.time", 1.0, "s", "lower", KIND_TIME, samples=[1.0, 1.1], extra={"method": "events"})
    judging.store(context, judging.judge(context, [metric]))
    [(path, (_, tests))] = recorder.pending().items()
    assert path == tmp_path / "f.yaml"
    assert tests[NODE]["step.time"] == metric_to_entry(metric)
    assert set(metric_to_entry(metric)) >= {"value", "unit", "better", "kind", "samples", "method"}
    assert not {"normalized", "reference"} & set(metric_to_entry(metric))


def test_a_re_record_sees_the_stored_class_for_its_hysteresis_unless_every_entry_is_rewritten(tmp_path: Path) -> None:
    from pytest_gpuperf.extensions import MeasureContext

    stored = {"step.bound": {"value": "latency-bound", "unit": "", "better": "equal", "kind": "category"}}
    judging = Judging(settings(tmp_path, update=True), FixedBaselines(stored), Recorder())
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    measured = MeasureContext(context, lambda: None, "step", None, [], judging)  # type: ignore[arg-type]
    assert measured.baseline_value("step.bound") is None  # nothing is judged while recording
    assert measured.recorded_value("step.bound") == "latency-bound"  # but a class near its boundary stays put
    judging = Judging(settings(tmp_path, update=True), FixedBaselines(stored), Recorder(update_all=True))
    measured = MeasureContext(context, lambda: None, "step", None, [], judging)  # type: ignore[arg-type]
    assert measured.recorded_value("step.bound") is None  # --gpuperf-update-all: classified afresh


def test_the_context_is_frozen_and_refuses_unknown_marker_keys() -> None:
    context = build_context(NODE, FakeBackend(), {"max_time": 1.0}, world_size=1)  # type: ignore[arg-type]
    assert isinstance(context, TestContext) and context.options["max_time"] == 1.0
    with pytest.raises(AttributeError):
        context.world_size = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        context.options["max_time"] = 2.0  # type: ignore[index]
    with pytest.raises(MarkerError, match="unknown argument"):
        build_context(NODE, FakeBackend(), {"tolerence": 0.1})  # type: ignore[arg-type]


def test_the_rank_service_collects_metrics_instead_of_judging() -> None:
    rank = CollectingJudging(settings(Path(".")), FixedBaselines({"step.time": time_entry(1.0)}))  # type: ignore[arg-type]
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    metric = Metric("step.time", 9.0, "s", "lower", KIND_TIME, samples=[9.0] * 5)
    verdicts = rank.judge(context, [metric])
    assert [v.status for v in verdicts] == ["info"] and not rank.wants_confirmation(verdicts)
    rank.store(context, verdicts)
    assert rank.metrics == [metric] and not rank.verdicts
