"""``gpuperf_vulkan_device`` and ``gpuperf_vulkan_adapters``, and a perf run on lavapipe end to end."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pytest_gpuperf.backends.vulkan.adapters import AdapterInfo, AdapterSelectionError, select_adapter

pytest.importorskip("wgpu", reason="the vulkan backend needs wgpu (pip install 'pytest-gpuperf[vulkan]')")

WGSL_PERF_TEST = """
import numpy as np
import pytest
from pytest_gpuperf.backends.vulkan import kernels

@pytest.mark.gpuperf_backends("vulkan")
def test_saxpy(gpuperf):
    device = gpuperf.device
    n = 1 << 16
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = device.empty(n)
    step = kernels.saxpy(device, 2.0, device.buffer(x), device.buffer(x), out)
    gpuperf.measure(step, name="saxpy", items=n, flops=2.0 * n, bytes_moved=12.0 * n)
    np.testing.assert_allclose(out.read(), 3.0 * x, rtol=1e-6)
"""


def _info(index: int, name: str, device_type: str) -> AdapterInfo:
    return AdapterInfo(index, name, "", 0, 0, device_type, "", "Vulkan", True, frozenset())


ADAPTERS = [_info(0, "llvmpipe (LLVM 15.0.6, 256 bits)", "CPU"), _info(1, "NVIDIA H200", "DiscreteGPU")]


def test_adapter_is_selected_by_index_type_or_name_and_defaults_to_the_most_gpu_like() -> None:
    assert select_adapter(ADAPTERS, "").name == "NVIDIA H200"
    assert select_adapter(ADAPTERS, "0").name.startswith("llvmpipe")
    assert select_adapter(ADAPTERS, "cpu").index == 0
    assert select_adapter(ADAPTERS, "discretegpu").index == 1
    assert select_adapter(ADAPTERS, "h200").index == 1


def test_an_adapter_spec_matching_nothing_lists_the_adapters() -> None:
    with pytest.raises(AdapterSelectionError, match=r"'radeon' matches no adapter.*1: NVIDIA H200 \| Vulkan"):
        select_adapter(ADAPTERS, "radeon")
    with pytest.raises(AdapterSelectionError, match="no adapter with that index"):
        select_adapter(ADAPTERS, "7")


def test_vulkan_device_option_selects_the_adapter_by_type(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.backends.vulkan.adapters import native_adapters

    types = [info.device_type for info, _ in native_adapters()]
    wanted = "CPU" if "CPU" in types else types[0]  # lavapipe here and in CI; the GPU's type elsewhere
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.gpuperf_backends("vulkan")
        def test_adapter(gpuperf):
            assert gpuperf.device.device_type == {wanted!r}
        """
    )
    result = pytester.runpytest(
        "-o", f"gpuperf_vulkan_device={wanted}", "--gpuperf-backend", "vulkan", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_vulkan_device_option_from_the_ini_file_that_matches_nothing_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\ngpuperf_vulkan_device = nosuchgpu\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpuperf_vulkan_device='nosuchgpu' matches no adapter*adapters: 0: *| Vulkan |*"])


def test_adapters_listing_prints_every_adapter_with_cooperative_matrix_support(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-o", "gpuperf_vulkan_adapters=true", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["0: * | Vulkan | * | driver * | VK_KHR_cooperative_matrix: *"])


def test_perf_run_on_vulkan_records_then_compares_throughput_memory_and_bound(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    pytester.makepyfile(WGSL_PERF_TEST)
    recorded = pytester.runpytest("--gpuperf-update", "--gpuperf-backend", "vulkan", *fast_args)
    recorded.assert_outcomes(passed=1)
    baseline = next((pytester.path / "baselines").glob("vulkan-*.yaml")).read_text()
    for expected in ("saxpy.throughput", "saxpy.peak_memory", "saxpy.bound", "cooperative_matrix", "timer"):
        assert expected in baseline
    # unchanged code; lavapipe is host-CPU-like, so the 4x CPU tolerance keeps a loaded machine from deciding it
    compared = pytester.runpytest("--gpuperf", "--gpuperf-backend", "vulkan", "-v", *unchanged_args)
    compared.assert_outcomes(passed=1)
    # lavapipe's 256 KiB saxpy is memory-bound; on a real GPU's driver (the H200's) the same launch is latency-bound:
    # the class recorded is the one the comparison must find again.
    [bound] = [entry["value"] for name, entry in _entries(baseline) if name == "saxpy.bound"] or [None]
    assert bound in ("memory-bound", "latency-bound", "compute-bound")
    if "llvmpipe" in baseline:
        assert bound == "memory-bound"
    compared.stdout.fnmatch_lines([f"*saxpy: bound*{bound}*{bound}*"])


def _entries(text: str) -> list[tuple[str, Any]]:
    """(metric name, entry) of every metric in a baseline file's text."""
    data = yaml.safe_load(text)
    return [(name, entry) for test in data["tests"].values() for name, entry in test.items()]


def test_a_bound_marker_is_checked_on_vulkan_too(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(
        WGSL_PERF_TEST.replace(
            '@pytest.mark.gpuperf_backends("vulkan")',
            """
@pytest.mark.gpuperf_backends("vulkan")
@pytest.mark.gpuperf(bound="compute")""",
        )
    )
    result = pytester.runpytest("--gpuperf", "--gpuperf-backend", "vulkan", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*saxpy.bound is *-bound but @pytest.mark.gpuperf(bound='compute') expects compute-bound: *AI 0.167 FLOP/B*"]
    )
