"""Unit tests of formatting and fingerprint helpers."""

from __future__ import annotations

import os

import pytest

from pytest_gpuperf.backends.fingerprint import baseline_filename, describe, identity, software_differences
from pytest_gpuperf.units import format_bytes, format_change, format_rate, format_seconds, format_value

H200 = {
    "backend": "cuda",
    "device_name": "NVIDIA H200",
    "arch": "sm_90",
    "memory_gib": 140,
    "world_size": 1,
    "driver": "13.0",
    "torch": "2.11.0",
}


def test_bytes_seconds_and_rates_read_naturally() -> None:
    assert format_bytes(12.4 * 2**30) == "12.40 GiB"
    assert format_bytes(512) == "512 B"
    assert format_seconds(0.00123) == "1.23 ms"
    assert format_seconds(5e-6) == "5.00 us"
    assert format_rate(2.5e12, "FLOP/s") == "2.50 TFLOP/s"
    assert format_seconds(0.002) == "2.00 ms" and format_seconds(665.4e-6) == "665 us"  # the precision shows
    assert format_value(3 * 2**20, "B") == "3.00 MiB"
    assert format_value(262913.0, "") == "262913" and format_value(2.5, "x") == "2.5 x"  # a count keeps its digits
    assert format_change(1.228) == "+22.8%"
    assert format_change(0.9) == "-10.0%"


def test_baseline_file_name_comes_from_the_identity_fields_only() -> None:
    assert baseline_filename(H200) == "cuda-nvidia-h200-sm-90-140gib-ws1.yaml"
    assert baseline_filename({**H200, "driver": "99"}) == baseline_filename(H200)
    assert baseline_filename({**H200, "device_name": "NVIDIA L4"}) != baseline_filename(H200)
    assert baseline_filename({**H200, "world_size": 2}).endswith("-ws2.yaml")


def test_identity_description_and_software_changes() -> None:
    assert identity(H200) == {k: H200[k] for k in ("backend", "device_name", "arch", "memory_gib", "world_size")}
    assert describe(H200) == "NVIDIA H200 sm_90"
    assert describe({**H200, "world_size": 4}) == "NVIDIA H200 sm_90 (4 ranks)"
    assert software_differences(H200, {**H200, "torch": "2.12.0"}) == ["torch 2.11.0 -> 2.12.0"]
    assert software_differences(H200, H200) == []


def test_cpu_brand_comes_from_py_cpuinfo_and_falls_back_to_proc_cpuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from pytest_gpuperf.backends import cpu

    fake = types.ModuleType("cpuinfo")
    fake.get_cpu_info = lambda: {"brand_raw": "AMD EPYC 9654 96-Core Processor"}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cpuinfo", fake)
    monkeypatch.delenv(cpu.BRAND_ENV, raising=False)
    cpu.cpu_brand.cache_clear()
    assert cpu.cpu_brand() == "AMD EPYC 9654 96-Core Processor"
    assert os.environ[cpu.BRAND_ENV] == "AMD EPYC 9654 96-Core Processor"  # for the processes this one starts

    def broken() -> dict:
        raise RuntimeError("cpuid unavailable")

    fake.get_cpu_info = broken  # type: ignore[attr-defined]
    monkeypatch.delenv(cpu.BRAND_ENV)
    cpu.cpu_brand.cache_clear()
    monkeypatch.setattr(cpu, "_cpu_model_name", lambda: "Fallback CPU")
    assert cpu.cpu_brand() == "Fallback CPU"
    cpu.cpu_brand.cache_clear()


def test_a_process_started_by_one_that_read_the_cpu_brand_inherits_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from pytest_gpuperf.backends import cpu

    monkeypatch.setenv(cpu.BRAND_ENV, "Inherited CPU 9000")
    monkeypatch.setitem(sys.modules, "cpuinfo", None)  # an A/B worker, a rank: no CPUID subprocess again
    monkeypatch.setattr(cpu, "_cpu_model_name", lambda: pytest.fail("the inherited brand is not read again"))
    cpu.cpu_brand.cache_clear()
    try:
        assert cpu.cpu_brand() == "Inherited CPU 9000"
    finally:
        cpu.cpu_brand.cache_clear()
