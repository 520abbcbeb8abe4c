"""The MPS backend's code paths with ``torch.mps`` / ``torch.accelerator`` replaced by fakes (no Metal here).

What these tests cannot show: that real Metal timings and allocator numbers are right.
docs/backends.md lists what was never run on a Mac.
"""

from __future__ import annotations

import types

import pytest
import torch

from pytest_gpuperf.backends import mps as mps_module
from pytest_gpuperf.backends.mps import MEMORY_API_ACCELERATOR, MEMORY_API_SAMPLED, MpsBackend, parse_gpu_core_count


class FakeMetal:
    """Stands in for ``torch.mps``: an allocator counter, a clock of device work, and timing events."""

    def __init__(self) -> None:
        self.allocated = 4096
        self.driver = 1 << 20
        self.device_clock_ms = 0.0
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1

    def current_allocated_memory(self) -> int:
        return self.allocated

    def driver_allocated_memory(self) -> int:
        return self.driver

    def empty_cache(self) -> None:
        self.driver = self.allocated

    def make_event_class(self) -> type:
        metal = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.at: float | None = None

            def record(self) -> None:
                self.at = metal.device_clock_ms

            def synchronize(self) -> None:
                metal.syncs += 1

            def elapsed_time(self, end: Event) -> float:
                return end.at - self.at

        return Event


class FakeAccelerator:
    """Stands in for ``torch.accelerator``'s peak statistics."""

    def __init__(self, metal: FakeMetal) -> None:
        self.metal = metal
        self.peak = 0

    def reset_peak_memory_stats(self) -> None:
        self.peak = self.metal.allocated

    def max_memory_allocated(self) -> int:
        return self.peak


@pytest.fixture
def metal(monkeypatch: pytest.MonkeyPatch) -> FakeMetal:
    """Replace ``torch.mps`` functions with a :class:`FakeMetal` and hide ``torch.accelerator``'s peak API."""
    fake = FakeMetal()
    for name in ("synchronize", "current_allocated_memory", "driver_allocated_memory", "empty_cache"):
        monkeypatch.setattr(torch.mps, name, getattr(fake, name))
    monkeypatch.setattr(torch.mps, "Event", fake.make_event_class(), raising=False)
    monkeypatch.setattr(torch, "accelerator", types.SimpleNamespace(), raising=False)
    return fake


def _step_allocating(metal: FakeMetal, transient: int, kept: int, device_ms: float = 0.0):
    def step() -> object:
        metal.allocated += transient + kept
        metal.device_clock_ms += device_ms
        metal.allocated -= transient
        return object()

    return step


def test_availability_says_what_this_torch_build_has() -> None:
    found = MpsBackend().availability()
    if torch.backends.mps.is_available():
        assert found.available and found.reason.startswith("MPS: ")
    else:
        assert not found.available
        assert "MPS" in found.reason and ("built without" in found.reason or "no Metal device" in found.reason)


def test_time_block_returns_the_mps_event_interval_in_seconds(metal: FakeMetal) -> None:
    seconds = MpsBackend().time_block(_step_allocating(metal, 0, 0, device_ms=2.5), iters=4)
    assert seconds == pytest.approx(0.010)
    assert metal.syncs == 1  # the end event was waited on


def test_time_block_falls_back_to_synchronize_and_host_clock_without_mps_events(
    metal: FakeMetal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(torch.mps, "Event")
    seconds = MpsBackend().time_block(_step_allocating(metal, 0, 0), iters=3)
    assert seconds >= 0 and metal.syncs == 2  # synchronize before and after the host-timed block
    assert MpsBackend().fingerprint()["timer"] == "torch.mps.synchronize+host clock"


def test_peak_memory_uses_accelerator_stats_when_torch_has_them(
    metal: FakeMetal, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerator = FakeAccelerator(metal)

    def step() -> object:
        metal.allocated += 3000
        accelerator.peak = max(accelerator.peak, metal.allocated)  # what the allocator would record
        metal.allocated -= 3000
        return None

    monkeypatch.setattr(torch, "accelerator", accelerator)
    backend = MpsBackend()
    assert backend.measure_peak_memory(step) == 4096 + 3000  # the transient is seen
    assert backend.memory_api == MEMORY_API_ACCELERATOR
    assert "torch.accelerator.max_memory_allocated" in backend.memory_note()


def test_peak_memory_samples_current_allocation_without_accelerator_stats_and_says_what_it_misses(
    metal: FakeMetal,
) -> None:
    backend = MpsBackend()
    peak = backend.measure_peak_memory(_step_allocating(metal, transient=10_000, kept=500))
    assert peak == 4096 + 500  # the 10 kB transient freed inside the step is missed, as documented
    assert backend.memory_api == MEMORY_API_SAMPLED
    assert backend.last_driver_bytes == 1 << 20
    note = backend.memory_note()
    assert "current_allocated_memory" in note and "missed" in note and "driver_allocated_memory() = 1048576" in note


def test_accelerator_stats_that_raise_for_mps_fall_back_to_sampling(
    metal: FakeMetal, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Unsupported:
        def reset_peak_memory_stats(self) -> None:
            raise RuntimeError("device stats not supported for mps")

        def max_memory_allocated(self) -> int:
            raise AssertionError("not reached")

    monkeypatch.setattr(torch, "accelerator", Unsupported())
    backend = MpsBackend()
    assert backend.measure_peak_memory(_step_allocating(metal, 0, 100)) == 4096 + 100
    assert backend.memory_api == MEMORY_API_SAMPLED
    assert backend.fingerprint()["memory_api"] == MEMORY_API_SAMPLED  # remembered for the rest of the run


def test_fingerprint_has_chip_macos_version_and_gpu_cores(metal: FakeMetal, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"machdep.cpu.brand_string": "Apple M3 Max", "hw.memsize": str(36 * 2**30)}
    monkeypatch.setattr(mps_module, "_sysctl", lambda name: answers.get(name, ""))
    monkeypatch.setattr(mps_module, "_gpu_core_count", lambda: 30)
    monkeypatch.setattr(mps_module.platform, "mac_ver", lambda: ("14.5", ("", "", ""), "arm64"))
    fp = MpsBackend().fingerprint()
    assert (fp["backend"], fp["device_name"], fp["memory_gib"], fp["gpu_cores"], fp["macos"]) == (
        "mps",
        "Apple M3 Max",
        36,
        30,
        "14.5",
    )
    assert fp["timer"] == "torch.mps.Event"


def test_gpu_core_count_is_parsed_from_ioreg_or_system_profiler() -> None:
    ioreg = '    |   "gpu-core-count" = 10\n    |   "model" = "Apple M2"\n'
    profiler = "      Chipset Model: Apple M1 Pro\n      Total Number of Cores: 16\n"
    assert parse_gpu_core_count(ioreg) == 10
    assert parse_gpu_core_count("", profiler) == 16
    assert parse_gpu_core_count("no such key", "") == 0
