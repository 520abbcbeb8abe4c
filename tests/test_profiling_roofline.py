"""Roofline classification (four classes, cache roofs, counting errors, hysteresis); roofs in pytest's cache."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.profiling.roof_store import CACHE_PREFIX, CACHE_VERSION, RoofStore, cache_key
from pytest_gpuperf.profiling.roofline import (
    COMPUTE_BOUND,
    DEFAULT_LATENCY_SHARE,
    HOST_BOUND,
    HOST_CPU_LATENCY_SHARE,
    HYSTERESIS,
    LATENCY_BOUND,
    MEMORY_BOUND,
    Roofs,
    classify,
    default_latency_share,
    device_busy_share,
    normalize_bound,
)
from pytest_gpuperf.profiling.roofs import (
    REFRESH_TRIES,
    TRIES,
    RoofProvider,
    cpu_llc_bytes,
    dtype_class,
)

# The H200's measured roofs from ../shared/DESIGN.md: 790 TFLOP/s bf16, 4.3 TB/s copy.
P, W = 790e12, 4.3e12
ROOFS = Roofs(P, W, "bfloat16", "h200")


def roofline(flops: float, nbytes: float, seconds: float, peak: float, bandwidth: float, **kw: Any) -> Any:
    """Classify against DRAM-only roofs ``peak`` / ``bandwidth``."""
    return classify(flops, nbytes, seconds, Roofs(peak, bandwidth), **kw)


def test_ridge_point_intensity_and_shares_follow_the_roofline_model() -> None:
    n = 8192
    flops, nbytes = 2 * n**3, 3 * n * n * 2
    line = roofline(flops, nbytes, 1.366e-3, P, W)
    assert line.ridge_point == pytest.approx(P / W)
    assert line.arithmetic_intensity == pytest.approx(n / 3 * 2 / 2)  # 2n^3 / 6n^2 = n/3
    assert line.compute_share == pytest.approx(flops / 1.366e-3 / P)
    assert line.roof_share == pytest.approx(max(line.compute_share, line.bandwidth_share))
    assert line.bound == COMPUTE_BOUND


def test_low_intensity_near_the_bandwidth_roof_is_memory_bound() -> None:
    elements = 2**28
    line = roofline(elements, 3 * elements * 2, 0.3626e-3, P, W)  # the bf16 add ncu measured
    assert line.arithmetic_intensity < line.ridge_point
    assert line.bandwidth_share == pytest.approx(3 * elements * 2 / 0.3626e-3 / W)
    assert line.bound == MEMORY_BOUND
    norm = roofline(0, 4 * 16384 * 4096 * 2, 0.15e-3, P, W)  # no FLOPs counted: intensity 0
    assert norm.arithmetic_intensity == 0.0 and norm.bound == MEMORY_BOUND


def test_a_step_reaching_neither_roof_is_latency_bound_and_the_threshold_is_configurable() -> None:
    tiny = roofline(2 * 64**3, 3 * 64 * 64 * 4, 5.184e-6, P, W)
    assert tiny.roof_share < 0.01 and tiny.bound == LATENCY_BOUND
    share = roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W).roof_share  # about 28% of the roof
    assert roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W, latency_share=0.3).bound == LATENCY_BOUND
    assert roofline(2 * 8192**3, 3 * 8192**2 * 2, 5e-3, P, W, latency_share=share / 2).bound == COMPUTE_BOUND
    assert "latency-bound below 66%" in roofline(1, 1, 1, P, W).explain()


def test_the_latency_line_is_ncus_60_percent_of_peak_on_gpus_and_30_percent_on_host_cpus() -> None:
    # ncu's 60% of its DRAM peak (~4.83 TB/s on the H200) over our best-pattern roof (~4.37 TB/s): 66%
    assert DEFAULT_LATENCY_SHARE == pytest.approx(0.60 * 4.83 / 4.37, abs=0.01)
    assert default_latency_share(host_cpu=False) == DEFAULT_LATENCY_SHARE == 0.66
    assert default_latency_share(host_cpu=True) == HOST_CPU_LATENCY_SHARE == 0.3
    # the H200's small batched bmm (62% of the copy roof): ncu calls it latency-bound, and so does the GPU line
    bmm = dict(flops=2147483648.0, nbytes=100663296.0, seconds=3.814747799997744e-05)
    roofs = Roofs(801966891936134.4, 4232075185186.6606)
    assert classify(bmm["flops"], bmm["nbytes"], bmm["seconds"], roofs).bound == LATENCY_BOUND
    assert classify(bmm["flops"], bmm["nbytes"], bmm["seconds"], roofs, HOST_CPU_LATENCY_SHARE).bound == MEMORY_BOUND


def test_noise_near_a_boundary_keeps_the_baseline_class_but_a_clear_change_does_not() -> None:
    flops, nbytes = 2 * 8192**3, 3 * 8192**2 * 2
    seconds_at_threshold = flops / (DEFAULT_LATENCY_SHARE * P)
    just_below = roofline(flops, nbytes, seconds_at_threshold * 1.1, P, W, baseline_bound=COMPUTE_BOUND)
    assert (
        just_below.roof_share < DEFAULT_LATENCY_SHARE
        and just_below.bound == COMPUTE_BOUND
        and just_below.kept_from_baseline
    )
    assert "baseline's class is kept" in just_below.explain()
    far_below = roofline(
        flops, nbytes, seconds_at_threshold * (1 + HYSTERESIS) * 1.2, P, W, baseline_bound=COMPUTE_BOUND
    )
    assert far_below.bound == LATENCY_BOUND and not far_below.kept_from_baseline
    ridge_bytes = flops / (P / W)
    near_ridge = roofline(flops, ridge_bytes * 1.1, 2e-3, P, W, baseline_bound=COMPUTE_BOUND)
    assert near_ridge.arithmetic_intensity < near_ridge.ridge_point and near_ridge.bound == COMPUTE_BOUND
    assert roofline(flops, ridge_bytes * 2, 2e-3, P, W, baseline_bound=COMPUTE_BOUND).bound == MEMORY_BOUND


def test_zero_peaks_are_rejected() -> None:
    with pytest.raises(ValueError, match="measured roofs"):
        roofline(1, 1, 1, 0, W)
    assert math.isinf(roofline(10, 0, 1, P, W).arithmetic_intensity)


def test_a_device_idle_most_of_an_eager_step_is_host_bound_whatever_its_share() -> None:
    class Timing:
        typical = 400e-6
        device_time = 197e-6  # the seed's Linear on the H200: kernels 197 us of a 398 us eager step
        eager_time = 398e-6

    busy = device_busy_share(Timing())
    assert busy == pytest.approx(197 / 398)
    n = 4096
    line = classify(6 * 1024 * n * n, 3 * n * n * 2, 197e-6, ROOFS, device_busy=busy)
    assert line.bound == HOST_BOUND
    assert "device busy 49% of an eager step (host-bound below 50%)" in line.explain()
    kept = classify(6 * 1024 * n * n, 3 * n * n * 2, 197e-6, ROOFS, device_busy=0.55, baseline_bound=HOST_BOUND)
    assert kept.bound == HOST_BOUND and kept.kept_from_baseline
    assert classify(6 * 1024 * n * n, 3 * n * n * 2, 197e-6, ROOFS, device_busy=0.9).bound == COMPUTE_BOUND
    assert device_busy_share(object()) is None  # a timing loop without both times: no host verdict

    class Replayed:  # the timing loop's shape: typical is the device time when eager_time is set
        typical = 209e-6
        eager_time = 398e-6

    assert device_busy_share(Replayed()) == pytest.approx(209 / 398)


def test_a_working_set_that_fits_in_cache_is_judged_against_the_cache_roof() -> None:
    roofs = Roofs(P, W, cache_bandwidth=3 * W, cache_bytes=50e6, cache_name="L2")
    small = 3 * 8e6  # an elementwise op over 8 MB tensors: 24 MB working set, fits in 50 MB
    line = classify(0, small, small / (1.5 * W), roofs, working_set=small)
    assert line.level == "L2" and line.peak_bandwidth == 3 * W
    assert line.roof_share == pytest.approx(0.5) and not line.over_roof  # 150% of DRAM, 50% of L2
    cold = classify(0, small, small / (1.5 * W), roofs, working_set=small, cold=True)  # L2 flushed before each call
    assert cold.level == "DRAM" and cold.over_roof
    big = classify(0, 3e9, 3e9 / (0.8 * W), roofs, working_set=3e9)
    assert big.level == "DRAM" and big.bound == MEMORY_BOUND


def test_a_share_above_the_roof_is_flagged_as_a_counting_error_never_shown_as_a_share() -> None:
    line = classify(0, 2 * 2**32, 1e-3, ROOFS)  # 8 GiB "moved" in 1 ms: the roof is 4.3 TB/s
    assert line.over_roof and line.roof_share > 1
    text = line.explain()
    assert "roof share over 100%, not shown" in text and "counting error" in text and "bytes_moved=" in text
    assert f"{line.roof_share:.0%}" not in text.split("counting error")[0]
    assert line.as_extra()["over_roof"] is True and "counting error" in str(line.as_extra()["counting_error"])
    assert not classify(0, 1e9, 1e-3, ROOFS).over_roof


def test_bound_names_normalise_to_the_one_vocabulary() -> None:
    assert normalize_bound("memory") == MEMORY_BOUND
    assert normalize_bound("Compute_Bound") == COMPUTE_BOUND
    assert normalize_bound("host") == HOST_BOUND
    with pytest.raises(ValueError, match="'memory', 'compute', 'latency', 'host'"):
        normalize_bound("io")


class FakeCache:
    """pytest's ``config.cache`` interface (get/set of JSON values), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json_roundtrip(value)


def json_roundtrip(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


class CountingBackend(CpuBackend):
    """The CPU backend whose roofs are injected: each ``measure_roof`` call returns the next value."""

    def __init__(self, bandwidths: list[float]) -> None:
        self.bandwidths = bandwidths
        self.calls: list[str] = []
        self.tries: list[int] = []

    def measure_roof(self, what: str, cls: str, tries: int) -> dict[str, Any] | None:
        self.calls.append(what)
        self.tries.append(tries)
        if what == "compute":
            return {"peak_flops": 1e11}
        if what == "dram":
            return {"bandwidth": self.bandwidths.pop(0)}
        return {"bandwidth": 4e10, "cache_bytes": 32 * 2**20, "cache_name": "LLC"}


FINGERPRINT = {"backend": "cpu", "device_name": "Test CPU", "arch": "x86_64", "memory_gib": 8, "world_size": 1}


def test_roofs_live_in_pytest_cache_and_a_second_session_reuses_them() -> None:
    cache = FakeCache()
    backend = CountingBackend([1e10])
    first = RoofProvider(RoofStore(cache))
    roofs = first.roofs(backend, FINGERPRINT, "float32")
    assert (roofs.peak_flops, roofs.bandwidth, roofs.cache_bandwidth, roofs.cache_bytes) == (1e11, 1e10, 4e10, 2**25)
    [(key, entry)] = cache.values.items()
    assert key == CACHE_PREFIX + cache_key(FINGERPRINT) and entry["version"] == CACHE_VERSION
    assert first.calibrated == [f"{cache_key(FINGERPRINT)} (DRAM and cache bandwidth, float32 compute)"]
    second = RoofProvider(RoofStore(cache))
    assert second.roofs(CountingBackend([]), FINGERPRINT, "float32") == roofs and second.calibrated == []
    cache.values[key]["version"] = CACHE_VERSION + 1  # another version: measured again
    assert RoofProvider(RoofStore(cache)).roofs(CountingBackend([2e10]), FINGERPRINT, "float32").bandwidth == 2e10


def test_a_beaten_roof_is_measured_again_once_keeping_the_best() -> None:
    cache = FakeCache()
    backend = CountingBackend([1e10, 3e10, 5e10])
    provider = RoofProvider(RoofStore(cache))
    provider.roofs(backend, FINGERPRINT, "float32")
    refreshed = provider.refresh(backend, FINGERPRINT, "float32", "DRAM")
    assert refreshed is not None and refreshed.bandwidth == 3e10
    assert backend.tries == [TRIES, TRIES, TRIES, REFRESH_TRIES]  # a beaten roof gets a more thorough look
    assert provider.refresh(backend, FINGERPRINT, "float32", "DRAM") is None  # once per session and roof
    assert RoofProvider(RoofStore(cache)).roofs(backend, FINGERPRINT, "float32").bandwidth == 3e10
    lower = RoofProvider(RoofStore(cache))
    lower.roofs(backend, FINGERPRINT, "float32")
    backend.bandwidths = [2e10]  # a slower try never lowers the roof
    assert lower.refresh(backend, FINGERPRINT, "float32", "DRAM").bandwidth == 3e10


def test_without_a_cache_provider_roofs_are_kept_in_memory() -> None:
    store = RoofStore(None)
    provider = RoofProvider(store)
    backend = CountingBackend([1e10])
    provider.roofs(backend, FINGERPRINT, "float32")
    provider.roofs(backend, FINGERPRINT, "float32")
    assert backend.calls == ["dram", "cache", "compute"] and store.where == "memory only"


def test_recalibrate_measures_once_per_session_even_with_a_cached_entry() -> None:
    cache = FakeCache()
    RoofProvider(RoofStore(cache)).roofs(CountingBackend([1e10]), FINGERPRINT, "float32")
    again = CountingBackend([2e10])
    provider = RoofProvider(RoofStore(cache), recalibrate=True)
    assert provider.roofs(again, FINGERPRINT, "float32").bandwidth == 2e10
    assert provider.roofs(again, FINGERPRINT, "float32").bandwidth == 2e10 and again.calls.count("dram") == 1


def test_the_cpu_llc_size_is_read_from_sysfs(tmp_path: Any) -> None:
    for index, (level, size) in enumerate([(1, "48K"), (2, "1024K"), (3, "32768K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    assert cpu_llc_bytes(tmp_path) == 32 * 2**20
    assert cpu_llc_bytes(tmp_path / "missing") == 0


@pytest.mark.e2e
def test_a_real_cpu_calibration_measures_dram_cache_and_compute_roofs() -> None:
    backend = CpuBackend()
    provider = RoofProvider(RoofStore(FakeCache()))
    roofs = provider.roofs(backend, backend.fingerprint() | {"world_size": 1}, "float32")
    assert 1e8 < roofs.peak_flops < 1e14 and 1e8 < roofs.bandwidth < 1e12
    if cpu_llc_bytes():
        assert roofs.cache_bytes == cpu_llc_bytes() and roofs.cache_bandwidth and roofs.cache_bandwidth > 1e8
    assert dtype_class("float16", backend) == "bfloat16" and dtype_class("float64", backend) == "float64"
    assert torch.get_num_threads() >= 1


def test_a_step_a_few_percent_over_its_roof_is_flagged_as_running_at_the_roof() -> None:
    n = 8192
    at_roof = classify(2 * n**3, 3 * n * n * 2, 2 * n**3 / (1.03 * P), ROOFS)
    assert at_roof.over_roof and at_roof.bound == COMPUTE_BOUND
    assert "counting error within the roof's noise: the counted FLOPs give 103%" in at_roof.explain()
    assert "roof share over 100%, not shown" in at_roof.explain()


def test_a_backend_without_roofs_gets_a_note_not_a_crash() -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.backends.base import Availability, Backend
    from pytest_gpuperf.profiling.analytic import analytic_verdict

    class NoRoofs(Backend):
        name, runs_torch = "fpga", False

        def availability(self) -> Availability:
            return Availability(True, "here")

        def device(self) -> None:
            return None

        def fingerprint(self) -> dict[str, Any]:
            return dict(FINGERPRINT, backend="fpga")

        def synchronize(self) -> None:
            pass

        def time_block(self, step: Any, iters: int) -> float:
            return 1e-3 * iters

        def measure_peak_memory(self, step: Any) -> int:
            return 0

    context = SimpleNamespace(
        test=SimpleNamespace(backend=NoRoofs()),
        hints={"flops": 1e6, "bytes_moved": 1e6},
        timing=SimpleNamespace(typical=1e-3, median=1e-3),
        name="step",
        step=lambda: None,
    )
    result = analytic_verdict(context, RoofProvider(RoofStore(None)), FINGERPRINT, 0.3, None)  # type: ignore[arg-type]
    assert result.line is None and result.metrics == []
    assert (
        "backend fpga has no measured roofs" in result.note and "measure_roof(what, dtype_class, tries)" in result.note
    )
    hintless = SimpleNamespace(**{**vars(context), "hints": {}})
    assert (
        "pass measure(flops=..., bytes_moved=...)"
        in analytic_verdict(
            hintless,
            RoofProvider(RoofStore(None)),
            FINGERPRINT,
            0.3,
            None,  # type: ignore[arg-type]
        ).note
    )


def _hinted_cpu_context(backend: Any) -> Any:
    """A measured step's context with FLOP/byte hints (so counting needs no real step) on ``backend``."""
    from types import SimpleNamespace

    return SimpleNamespace(
        test=SimpleNamespace(backend=backend),
        hints={"flops": 1e9, "bytes_moved": 1e6},
        timing=SimpleNamespace(typical=1e-2, median=1e-2),
        name="step",
        step=lambda: None,
    )


def test_roofs_no_verdict_needs_are_not_measured_but_cached_ones_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """need_roofs False: an empty cache costs no calibration (the step gets no class); a filled one is used."""
    from pytest_gpuperf.profiling import analytic, counting

    monkeypatch.setattr(
        counting, "count_step", lambda step, sync: counting.StepCount(5.0, 5.0, "float32", ops=1, working_set=1e9)
    )
    backend = CountingBackend([1e10])
    cache = FakeCache()
    context = _hinted_cpu_context(backend)
    skipped = analytic.analytic_verdict(context, RoofProvider(RoofStore(cache)), FINGERPRINT, 0.3, None, False)
    assert backend.calls == [] and skipped.line is None and skipped.metrics == []
    assert skipped.skipped == analytic.ROOFS_NOT_NEEDED and skipped.note == ""
    needed = analytic.analytic_verdict(context, RoofProvider(RoofStore(cache)), FINGERPRINT, 0.3, None, True)
    assert backend.calls == ["dram", "cache", "compute"] and needed.line is not None
    cached = analytic.analytic_verdict(context, RoofProvider(RoofStore(cache)), FINGERPRINT, 0.3, None, False)
    assert backend.calls == ["dram", "cache", "compute"]  # nothing measured again
    assert cached.line is not None and "step.bound" in {m.name for m in cached.metrics}


class FolderCache(FakeCache):
    """pytest's cache with its ``mkdir`` (a folder under ``root``), where the roof lock file lives."""

    def __init__(self, root: Any) -> None:
        super().__init__()
        self.root = root

    def mkdir(self, name: str) -> Any:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def test_roofs_are_measured_under_a_file_lock_and_read_back_by_the_next_process(tmp_path: Any) -> None:
    """Of two processes sharing pytest's cache (xdist or A/B workers), one measures; the other reads its roofs."""
    import fcntl

    cache = FolderCache(tmp_path)
    held: list[bool] = []

    class LockChecking(CountingBackend):
        def measure_roof(self, what: str, cls: str, tries: int) -> dict[str, Any] | None:
            with (tmp_path / "gpuperf-roofs" / "measure.lock").open("a") as other:
                try:
                    fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.append(True)
                else:
                    fcntl.flock(other.fileno(), fcntl.LOCK_UN)
                    held.append(False)
            return super().measure_roof(what, cls, tries)

    first = LockChecking([1e10])
    RoofProvider(RoofStore(cache)).roofs(first, FINGERPRINT, "float32")
    assert held == [True, True, True]  # every calibration ran while the lock was held
    second = CountingBackend([])
    other = RoofProvider(RoofStore(cache))
    assert other.roofs(second, FINGERPRINT, "float32").bandwidth == 1e10 and second.calls == []
    assert other.calibrated == []


def test_an_exactly_counted_matmul_over_its_roof_says_the_roof_reads_low_not_a_counting_error() -> None:
    from dataclasses import replace

    from pytest_gpuperf.profiling.roofline import Roofline

    line = Roofline("compute-bound", 2e9, 1e6, 1e-3, 1.6e12, 1e11, 0.05)  # 2 TFLOP/s on a 1.6 TFLOP/s roof
    assert line.over_roof and line.over_roof_word() == "counting error (>100%)"
    exact = replace(line, exact_flops=True)
    assert exact.over_roof_word() == "above the measured roof (>100%)"
    assert exact.counting_error().startswith("above the measured roof: the counted FLOPs give 125%")
    assert "counting error" not in exact.explain() and "gpuperf_recalibrate" in exact.explain()
    bytes_over = replace(Roofline("memory-bound", 1e6, 2e8, 1e-3, 1.6e12, 1e11, 0.05), exact_flops=True)
    assert bytes_over.over_roof_word() == "counting error (>100%)"  # bytes are estimated: still a counting error
