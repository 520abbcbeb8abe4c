"""Device time on CUDA with injected graphs, profilers and NVML readings (runs without a GPU), NVML's decoding,
and CUPTI's attribution of kernels to steps."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from pytest_gpuperf.backends.cuda import CudaBackend
from pytest_gpuperf.timing import MeasureConfig, TimingResult
from pytest_gpuperf.timing.contention import ContentionGuard
from pytest_gpuperf.timing.cuda.cupti import per_range_sums, step_ranges_and_work
from pytest_gpuperf.timing.cuda.device_time import measure_device_time
from pytest_gpuperf.timing.cuda.nvml import ClockReading, ClockWatch, Nvml, reason_names
from pytest_gpuperf.timing.sampling import SamplingPlan
from pytest_gpuperf.timing.warmup import WarmupResult


class FakeCuda(CudaBackend):
    """The cuda backend with eager calls that take ``eager`` seconds each (no device)."""

    def __init__(self, eager: float = 400e-6) -> None:
        self.eager = eager
        self.calls = 0

    def time_block(self, step, iters: int) -> float:
        self.calls += iters
        return self.eager * iters


class FakeGraph:
    """A captured graph of ``iters`` calls whose replay takes ``per_call`` seconds per call."""

    def __init__(self, iters: int, per_call: float = 205e-6) -> None:
        self.iters = iters
        self.per_call = per_call
        self.closed = False

    def time(self) -> float:
        return self.per_call * self.iters

    def close(self) -> None:
        self.closed = True


def _watch(readings=None) -> ClockWatch:
    it = iter(readings or itertools.repeat(ClockReading(1980, 0, 50)))
    return ClockWatch(lambda: next(it))


def _run(
    config: MeasureConfig, *, capture, kernel_sums=None, watch=None, eager=400e-6, deadline=10_000.0
) -> TimingResult:
    backend = FakeCuda(eager)
    guard = ContentionGuard(read_wait=lambda: None, read_pressure=lambda: None)
    clock = itertools.count(deadline - 10_000.0, 0.001)  # 1 ms per clock read: budgets end deterministically
    return measure_device_time(
        backend.time_block,
        lambda: None,
        SamplingPlan(config, None, deadline=deadline, floor=3, guard=guard),
        warm=WarmupResult(calls=10, per_call=eager, wall_per_call=eager),
        iters=5,
        capture=capture,
        kernel_sums=kernel_sums or (lambda step, n: ([], "not called")),
        watch=watch or _watch(),
        now=lambda: next(clock),
    )


CONFIG = MeasureConfig(min_samples=8, max_samples=8, target_precision=1e-9)


def test_a_captured_step_is_judged_by_graph_replay_with_eager_time_and_host_overhead_beside_it():
    graphs = []

    def capture(step, iters):
        graphs.append(FakeGraph(iters))
        return graphs[-1], ""

    result = _run(CONFIG, capture=capture)
    assert result.method == "cuda_graph" and graphs[0].closed and graphs[0].iters == 5
    assert result.typical == pytest.approx(205e-6) and result.eager_time == pytest.approx(400e-6)
    assert result.host_overhead == pytest.approx(195e-6)
    assert result.host_bound is False  # device busy 51% of the eager step
    assert len(result.samples) == len(result.eager_samples) == 8 and result.stop == "precise"
    summary = result.summary()
    assert summary["eager_time"] == pytest.approx(400e-6) and summary["host_bound"] is False
    assert summary["sm_clock_mhz"] == 1980 and summary["throttled"] is False


def test_every_sample_loop_reads_the_injected_clock_never_the_hosts():
    # A CI host up for hours has perf_counter() past a small absolute deadline; only the injected clock may count.
    already_passed = time.perf_counter() - 1.0
    for capture in (lambda step, iters: (FakeGraph(iters), ""), lambda step, iters: (None, "sync in step")):
        result = _run(CONFIG, capture=capture, kernel_sums=lambda step, n: ([], "no CUPTI"), deadline=already_passed)
        assert len(result.samples) == 8 and not result.budget_exhausted


def test_a_step_whose_device_is_idle_most_of_the_eager_step_is_host_bound():
    result = _run(CONFIG, capture=lambda step, iters: (FakeGraph(iters, per_call=50e-6), ""))
    assert result.host_bound is True


def test_a_failed_capture_falls_back_to_cupti_kernel_sums_and_keeps_eager_samples():
    asked = []

    def sums(step, n):
        asked.append(n)
        return [197e-6] * n, ""

    result = _run(CONFIG, capture=lambda step, iters: (None, "RuntimeError: capturable=False"), kernel_sums=sums)
    assert result.method == "cupti" and result.iters_per_sample == 1
    assert len(asked) == 1  # one profiler session per measurement, never one per sample
    assert result.typical == pytest.approx(197e-6) and result.eager_time == pytest.approx(400e-6)
    assert "capturable=False" in result.method_note


def test_without_graph_or_cupti_the_eager_events_are_judged_and_the_note_says_so():
    result = _run(
        CONFIG, capture=lambda step, iters: (None, "sync in step"), kernel_sums=lambda step, n: ([], "no CUPTI")
    )
    assert result.method == "events" and result.eager_samples == [] and result.host_overhead is None
    assert result.typical == pytest.approx(400e-6)
    assert result.sample_clocks == [1980.0] * len(result.samples)  # every eager sample has its clock: cycles
    assert "sync in step" in result.method_note and "no CUPTI" in result.method_note
    assert "host time included" in result.method_note


def test_graph_off_and_no_cupti_never_capture_nor_profile():
    def refuse(*args):
        raise AssertionError("must not be called")

    result = _run(MeasureConfig(min_samples=4, max_samples=4, cuda_graph="off", cupti=False), capture=refuse)
    assert result.method == "events" and len(result.samples) == 4


def test_a_step_too_slow_to_capture_within_the_budget_is_not_captured():
    def refuse(*args):
        raise AssertionError("must not be called")

    config = MeasureConfig(max_time=1.0, min_samples=2, max_samples=2, cupti=False)
    result = _run(config, capture=refuse, eager=0.3)
    assert result.method == "events" and "over half the budget" in result.method_note


def test_nvml_readings_during_measurement_are_summarised():
    readings = itertools.chain([ClockReading(1980, 0x1, 48)], itertools.repeat(ClockReading(1755, 0x4 | 0x20, 83)))
    result = _run(CONFIG, capture=lambda step, iters: (FakeGraph(iters), ""), watch=_watch(readings))
    clocks = result.clocks
    assert clocks is not None and clocks["nvml_readings"] >= 2
    assert clocks["sm_clock_mhz"] == 1755 and clocks["sm_clock_mhz_max"] == 1980
    assert clocks["throttled"] is True and clocks["power_capped"] is True and clocks["gpu_temperature_c"] == 83
    assert clocks["clock_events"] == "gpu_idle,sw_power_cap,sw_thermal_slowdown"


def test_without_nvml_the_clocks_say_why():
    assert ClockWatch(None, "NVML unavailable: no libnvidia-ml").summary() == {
        "nvml_error": "NVML unavailable: no libnvidia-ml"
    }
    with pytest.raises(OSError):
        Nvml(library="libnvidia-ml-absent.so.1")


def test_clock_event_reason_names_decode_bits():
    assert reason_names(0) == []
    assert reason_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert reason_names(0x10000) == ["0x10000"]


def test_kernels_are_attributed_to_the_step_range_their_start_falls_in():
    ranges = [(0, 1000), (1000, 2000)]
    activities = [(10, 100), (500, 50), (1200, 300), (2500, 999), (999, 7)]  # one outside every range
    assert per_range_sums(ranges, activities) == pytest.approx([157e-9, 300e-9])


def test_only_gpu_work_counts_not_the_gpu_spans_of_annotations():
    # torch.optim's own record_function ranges show on the GPU timeline spanning their kernels: counting them
    # doubled an AdamW step on the H200 (979 us of "kernels" for a 496 us eager step).
    events = [
        ("gpuperf_step_0", "CPU", "user_annotation", 0, 1000),
        ("gpuperf_step_0", "CUDA", "gpu_user_annotation", 100, 800),
        ("Optimizer.step#AdamW.step", "CUDA", "gpu_user_annotation", 100, 800),
        ("multi_tensor_apply_kernel", "CUDA", "kernel", 100, 300),
        ("Memset (Device)", "CUDA", "gpu_memset", 450, 50),
        ("cudaLaunchKernel", "CPU", "cuda_runtime", 20, 5),
        ("gpuperf_step_1", "CPU", "user_annotation", 1000, 1000),
        ("Memcpy HtoD", "CUDA", "gpu_memcpy", 1100, 200),
    ]
    ranges, work = step_ranges_and_work(events)
    assert ranges == {0: (0, 1000), 1: (1000, 2000)}
    assert per_range_sums([ranges[0], ranges[1]], work) == pytest.approx([350e-9, 200e-9])


def test_without_activity_types_gpu_spans_named_like_cpu_ranges_are_skipped():
    # torch 2.11 (the H200's) reports no activity type: the annotation spans are told apart by name.
    events = [
        ("gpuperf_step_0", "CPU", "", 0, 1000),
        ("Optimizer.step#AdamW.step", "CPU", "", 50, 900),
        ("gpuperf_step_0", "CUDA", "", 100, 800),
        ("Optimizer.step#AdamW.step", "CUDA", "", 100, 800),
        ("void multi_tensor_apply_kernel<...>", "CUDA", "", 100, 300),
        ("Memset (Device)", "CUDA", "", 450, 50),
    ]
    ranges, work = step_ranges_and_work(events)
    assert per_range_sums([ranges[0]], work) == pytest.approx([350e-9])


def test_this_torchs_profiler_events_yield_the_step_ranges():
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from pytest_gpuperf.timing.cuda.cupti import RANGE_PREFIX, profiled_events

    x = torch.randn(1000)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for index in range(3):
            with record_function(f"{RANGE_PREFIX}{index}"):
                x * 2
    ranges, work = step_ranges_and_work(profiled_events(prof))
    assert sorted(ranges) == [0, 1, 2] and work == []
    assert all(end > start for start, end in ranges.values())


def _capped_run(config: MeasureConfig, deadline: float, now: Callable[[], float]) -> TimingResult:
    """Graph samples of a no-op step on a fake GPU that NVML reads at its power cap (690 W, sw_power_cap)."""
    capped = _watch(itertools.repeat(ClockReading(1545, 0x4, 60, 3201, 690.0)))
    guard = ContentionGuard(read_wait=lambda: None, read_pressure=lambda: None)
    return measure_device_time(
        FakeCuda().time_block,
        lambda: None,
        SamplingPlan(config, None, deadline=deadline, floor=3, guard=guard),
        warm=WarmupResult(calls=10, per_call=400e-6, wall_per_call=400e-6),
        iters=5,
        capture=lambda step, iters: (FakeGraph(iters), ""),
        watch=capped,
        now=now,
    )


def test_a_gpu_at_its_power_cap_is_sampled_for_the_least_capped_span_whatever_the_samples_say():
    from pytest_gpuperf.timing.cuda.device_time import CAPPED_SPAN

    ticks = []
    clock = itertools.count(0.0, 0.001)

    def now() -> float:
        ticks.append(next(clock))
        return ticks[-1]

    result = _capped_run(CONFIG, 2.0, now)  # 8 samples would be enough (max_samples 8)
    warmed = result.power_state["power_warmup_seconds"]
    assert result.power_state["min_sample_seconds"] == CAPPED_SPAN and result.stop == "precise"
    assert len(result.samples) > 8 and ticks[-1] >= warmed + CAPPED_SPAN  # sampled for the whole span
    uncapped = _run(CONFIG, capture=lambda step, iters: (FakeGraph(iters), ""))
    assert len(uncapped.samples) == 8 and "min_sample_seconds" not in (uncapped.power_state or {})


def test_a_measuring_budget_below_the_capped_span_shortens_it():
    # An A/B worker measures for --gpuperf-ab-max-time (0.5 s): the span at the cap is that budget, not 1 s.
    clock = itertools.count(0.0, 0.001)
    config = MeasureConfig(max_time=0.3, min_samples=8, max_samples=8, target_precision=1e-9)
    result = _capped_run(config, 0.3, lambda: next(clock))
    assert result.power_state["min_sample_seconds"] == 0.3 and len(result.samples) > 8


def test_measure_time_on_cuda_returns_one_finished_record_with_its_instruments_facts(monkeypatch):
    # The loop's CUDA branch end to end, without a GPU: a fake graph capture and a fake NVML behind the defaults.
    import pytest_gpuperf.timing.cuda.device_time as device_time
    import pytest_gpuperf.timing.cuda.graph as graph
    from pytest_gpuperf.timing import measure_time

    monkeypatch.setattr(graph, "capture", lambda step, iters: (FakeGraph(iters), ""))
    monkeypatch.setattr(device_time, "_default_watch", lambda: _watch())
    config = MeasureConfig(max_time=0.5, min_samples=8, max_samples=8, target_precision=1e-9, warmup_calls=20)
    result = measure_time(FakeCuda(), lambda: None, config)
    assert result.method == "cuda_graph" and result.typical == pytest.approx(205e-6)
    assert result.clocks["sm_clock_mhz"] == 1980 and result.power_state["power_settled"] is True
    assert result.contention is not None and result.warmup_calls >= 20 and result.elapsed > 0
    with pytest.raises(AttributeError, match="read-only"):
        result.method = "events"  # finished once: nothing outside the timing package rewrites it


class CountingGraph(FakeGraph):
    """A fake graph that counts its replays."""

    replays = 0

    def time(self) -> float:
        CountingGraph.replays += 1
        return super().time()


def test_the_gpu_ramp_is_left_to_the_power_warm_up_and_paid_by_replays_only_when_nvml_cannot_hold_the_state():
    from pytest_gpuperf.timing.sampling import ramp_in_warmup

    ramped = MeasureConfig(min_samples=8, max_samples=8, target_precision=1e-9, gpu_ramp=0.3)
    assert ramp_in_warmup("cuda", ramped) == ramped.warmup_time  # the power warm-up will ramp the GPU
    assert ramp_in_warmup("mps", ramped) == ramp_in_warmup("vulkan", ramped) == 0.3
    from dataclasses import replace

    assert ramp_in_warmup("cuda", replace(ramped, power_warmup=0.0)) == 0.3
    assert ramp_in_warmup("cuda", replace(ramped, cuda_graph="off")) == 0.3

    def graph_samples(config: MeasureConfig, watch: ClockWatch) -> int:
        CountingGraph.replays = 0
        result = _run(config, capture=lambda step, iters: (CountingGraph(iters), ""), watch=watch)
        assert result.method == "cuda_graph" and len(result.samples) == 8
        return CountingGraph.replays

    with_nvml = graph_samples(ramped, _watch())  # the power warm-up ran: no further ramp
    without_nvml = graph_samples(ramped, ClockWatch(None, "NVML unavailable"))
    unramped = graph_samples(CONFIG, ClockWatch(None, "NVML unavailable"))
    # 1 ms per clock read: the 0.3 s ramp is about 150 replays (two reads each) the others do not make
    assert without_nvml - unramped > 100 and with_nvml < without_nvml


def test_without_a_graph_the_gpu_ramp_is_paid_by_eager_calls_before_the_samples():
    ramped = MeasureConfig(min_samples=8, max_samples=8, target_precision=1e-9, gpu_ramp=0.3)
    calls = []
    for config in (CONFIG, ramped):
        backend = FakeCuda()
        guard = ContentionGuard(read_wait=lambda: None, read_pressure=lambda: None)
        clock = itertools.count(0.0, 0.001)
        result = measure_device_time(
            backend.time_block,
            lambda: None,
            SamplingPlan(config, None, deadline=10.0, floor=3, guard=guard),
            warm=WarmupResult(calls=10, per_call=400e-6, wall_per_call=400e-6),
            iters=5,
            capture=lambda step, iters: (None, "sync in step"),
            kernel_sums=lambda step, n: ([], "no CUPTI"),
            watch=_watch(),
            now=lambda clock=clock: next(clock),
        )
        assert result.method == "events" and len(result.samples) == 8
        calls.append(backend.calls)
    assert calls[1] - calls[0] >= 5 * 100  # the ramp's eager calls (5 per time_block), on top of the samples


def test_a_gpu_tests_handle_asks_for_the_clock_ramp_instead_of_stretching_every_warm_up() -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.context import build_context
    from pytest_gpuperf.fixture import GPU_WARMUP_SECONDS, GpuPerf
    from tests.test_judging import NODE, FakeBackend

    judging = SimpleNamespace(settings=SimpleNamespace(measure=MeasureConfig()))
    gpu = GpuPerf(build_context(NODE, FakeBackend(), {}), judging).measure_config()  # type: ignore[arg-type]
    assert gpu.gpu_ramp == GPU_WARMUP_SECONDS and gpu.warmup_time == MeasureConfig().warmup_time

    class HostCpu(FakeBackend):
        def is_host_cpu(self) -> bool:
            return True

    cpu = GpuPerf(build_context(NODE, HostCpu(), {}), judging).measure_config()  # type: ignore[arg-type]
    assert cpu.gpu_ramp == 0.0
