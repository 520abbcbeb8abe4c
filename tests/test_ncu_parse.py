"""Parsing real Nsight Compute CSV (captured on an H200, tests/data/ncu/) and the Speed-of-Light verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuperf.profiling.ncu_parse import (
    NcuParseError,
    csv_rows,
    parse_details,
    parse_number,
    parse_raw,
    to_base,
    unavailable_reason,
)
from pytest_gpuperf.profiling.ncu_sol_rules import classify_kernels, classify_sol
from pytest_gpuperf.profiling.roofline import COMPUTE_BOUND, LATENCY_BOUND, MEMORY_BOUND, normalize_bound

DATA = Path(__file__).parent / "data" / "ncu"


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_numbers_with_thousands_separators_and_empty_cells_parse() -> None:
    assert parse_number("1,366,048") == 1366048.0
    assert parse_number("26,054,506.67") == pytest.approx(26054506.67)
    assert parse_number("") is None
    assert parse_number("no data") is None


def test_scaled_units_convert_to_base_units() -> None:
    assert to_base(102.912, "us") == pytest.approx(102.912e-6)
    assert to_base(1_366_048, "ns") == pytest.approx(1.366048e-3)
    assert to_base(2.43, "Tbyte/s") == pytest.approx(2.43e12)
    assert to_base(11.80, "Mbyte") == pytest.approx(11.8e6)
    assert to_base(3.20, "Ghz") == pytest.approx(3.2e9)
    assert to_base(54.91, "%") == 54.91


def test_warning_lines_are_not_csv_rows() -> None:
    text = load("gemm_bf16_8192_raw.csv")
    assert text.startswith("==WARNING==")
    rows = csv_rows(text)
    assert rows[0][0] == "ID" and rows[1][0] == "" and rows[2][0] == "0"


def test_the_bf16_gemm_raw_page_gives_one_kernel_with_its_sol_numbers() -> None:
    [kernel] = parse_raw(load("gemm_bf16_8192_raw.csv"))
    assert kernel.name == "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
    assert kernel.duration_s == pytest.approx(1.366048e-3)
    assert kernel.sm_pct == pytest.approx(93.46)
    assert kernel.memory_pct == pytest.approx(94.63)
    assert kernel.dram_pct == pytest.approx(21.01)
    assert kernel.dram_bytes == pytest.approx(1_250_616_320 + 130_342_912)
    assert kernel.grid == "(2, 66, 1)"
    # 2 * 8192^3 FLOPs in 1.366 ms is ~805 TFLOP/s, the H200's measured bf16 roof
    assert 2 * 8192**3 / kernel.duration_s == pytest.approx(805e12, rel=0.01)


def test_the_elementwise_add_moves_its_three_tensors_through_dram() -> None:
    [kernel] = parse_raw(load("add_bf16_raw.csv"))
    assert kernel.dram_bytes == pytest.approx(3 * 2**28 * 2, rel=0.02)
    assert kernel.dram_pct == pytest.approx(91.34)
    assert kernel.short_name().startswith("void vectorized_elementwise_kernel<8, CUDAFunctor_add")
    assert len(kernel.short_name()) == 60 and kernel.short_name().endswith("...")


def test_a_raw_page_without_base_units_is_scaled_to_base_units() -> None:
    [kernel] = parse_raw(load("layernorm_sol_raw.csv"))
    assert kernel.duration_s == pytest.approx(102.912e-6)
    assert kernel.sm_pct == pytest.approx(77.753784)
    assert kernel.memory_pct == pytest.approx(54.911246)
    assert kernel.dram_pct == pytest.approx(50.576909)  # section capture: dram__cycles_active stands in
    assert kernel.dram_bytes is None


def test_details_page_agrees_with_the_raw_page_of_the_same_report() -> None:
    [detail] = parse_details(load("layernorm_sol_details.csv"))
    [raw] = parse_raw(load("layernorm_sol_raw.csv"))
    assert detail.name == raw.name
    assert detail.sm_pct == pytest.approx(raw.sm_pct, abs=0.01)
    assert detail.memory_pct == pytest.approx(raw.memory_pct, abs=0.01)
    assert detail.duration_s == pytest.approx(raw.duration_s, rel=1e-3)
    assert detail.dram_pct == pytest.approx(50.58)


def test_text_without_a_header_is_rejected_with_the_fix() -> None:
    with pytest.raises(NcuParseError, match="--csv"):
        parse_raw('"0","1"\n', "capture.csv")
    assert parse_raw("==PROF== Disconnected\n") == []


def test_counter_permission_errors_are_recognised() -> None:
    text = (
        "==PROF== Connected to process 42\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
        "on the target device 0.\n"
    )
    assert unavailable_reason(text).startswith("==ERROR== ERR_NVGPUCTRPERM")
    assert unavailable_reason(load("gemm_bf16_8192_raw.csv")) is None
    assert unavailable_reason("==ERROR== The application returned an error code (1).") is None
    assert unavailable_reason("==ERROR== The application returned an error code (1).", any_error=True)


@pytest.mark.parametrize(
    ("name", "expected", "rule"),
    [
        ("gemm_bf16_8192_raw.csv", COMPUTE_BOUND, "seed table"),
        ("add_bf16_raw.csv", MEMORY_BOUND, "seed table"),
        ("tiny_gemm_fp32_raw.csv", LATENCY_BOUND, "ncu rule"),
        ("layernorm_sol_raw.csv", COMPUTE_BOUND, "grey zone"),
    ],
)
def test_real_kernels_get_the_bound_their_sol_numbers_show(name: str, expected: str, rule: str) -> None:
    verdict = classify_kernels(parse_raw(load(name)))
    assert verdict.bound == expected
    assert verdict.rule.startswith(rule)


def test_sol_thresholds_at_their_edges() -> None:
    assert classify_sol(59.9, 59.9, 59.9).bound == LATENCY_BOUND
    assert classify_sol(24.9, 80.0, 75.1).bound == MEMORY_BOUND
    assert classify_sol(75.1, 60.0, 49.9).bound == COMPUTE_BOUND
    grey = classify_sol(40.0, 70.0, 60.0)
    assert grey.bound == MEMORY_BOUND and "grey zone" in grey.rule
    assert "SM 40%" in grey.describe()


def test_a_region_is_classified_by_duration_weighted_percentages() -> None:
    gemm = parse_raw(load("gemm_bf16_8192_raw.csv"))
    tiny = parse_raw(load("tiny_gemm_fp32_raw.csv"))
    # one long saturating GEMM dominates many tiny idle launches
    assert classify_kernels(gemm + tiny * 10).bound == COMPUTE_BOUND
    # 1000 tiny launches outweigh the GEMM's 1.37 ms: the region is latency-bound
    mixed = classify_kernels(gemm + tiny * 1000)
    assert mixed.bound == LATENCY_BOUND
    assert mixed.sm_pct == pytest.approx((93.46 * 1366.048 + 0.36 * 5.184 * 1000) / (1366.048 + 5184), rel=1e-4)


def test_bound_names_normalise_and_bad_ones_name_the_choices() -> None:
    assert normalize_bound("compute") == COMPUTE_BOUND
    assert normalize_bound("Memory_Bound") == MEMORY_BOUND
    with pytest.raises(ValueError, match="'memory', 'compute', 'latency'"):
        normalize_bound("io")


# The perf suite's own region captures from `gpu/profiling.sh` on the H200 (2026-11-29, `--gpuperf-ncu`: SOL metrics
# around one bracketed call of the step), kept as ncu wrote them.


def test_the_suite_matmul_capture_is_one_saturating_gemm() -> None:
    text = load("h200_large_matmul_step_raw.csv")
    assert unavailable_reason(text) is None
    [kernel] = parse_raw(text, "h200_large_matmul_step_raw.csv")
    assert kernel.name == "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"
    assert kernel.duration_s == pytest.approx(1.383168e-3)
    assert (kernel.sm_pct, kernel.memory_pct, kernel.dram_pct) == pytest.approx((93.49, 94.65, 20.75))
    assert kernel.dram_bytes == pytest.approx(1_381_126_144)
    assert kernel.grid == "(2, 66, 1)"
    # 2 * 8192^3 FLOPs in 1.383 ms: ~795 TFLOP/s, within 2% of the 781 TFLOP/s bf16 roof the suite measured
    assert 2 * 8192**3 / kernel.duration_s == pytest.approx(781e12, rel=0.02)
    verdict = classify_kernels([kernel])
    assert verdict.bound == COMPUTE_BOUND and verdict.rule.startswith("seed table")


def test_the_suite_layernorm_softmax_capture_is_compute_bound_by_sol_though_it_moves_memory() -> None:
    layer_norm, softmax = parse_raw(load("h200_layernorm_softmax_step_raw.csv"))
    assert layer_norm.short_name().startswith("void unnamed>::vectorized_layer_norm_kernel<BFloat16")
    assert softmax.short_name().startswith("void unnamed>::cunn_SoftMaxForwardReg<BFloat16")
    assert layer_norm.duration_s == pytest.approx(103.232e-6)
    assert softmax.duration_s == pytest.approx(210.752e-6)
    assert (layer_norm.sm_pct, layer_norm.memory_pct, layer_norm.dram_pct) == pytest.approx((77.37, 54.67, 50.44))
    assert (softmax.sm_pct, softmax.memory_pct, softmax.dram_pct) == pytest.approx((76.35, 26.90, 24.72))
    # each reads and writes one 16384x4096 bf16 tensor: 2 x 128 MiB, within 8% of what DRAM counted
    for kernel in (layer_norm, softmax):
        assert kernel.dram_bytes == pytest.approx(2 * 16384 * 4096 * 2, rel=0.08)
    verdict = classify_kernels([layer_norm, softmax])
    assert verdict.bound == COMPUTE_BOUND and verdict.rule.startswith("seed table")
    assert (verdict.sm_pct, verdict.memory_pct, verdict.dram_pct) == pytest.approx((76.69, 36.03, 33.18), abs=0.01)


def test_the_suite_linear_fp16_capture_lists_every_kernel_of_one_forward_backward() -> None:
    kernels = parse_raw(load("h200_linear_fp16_step_raw.csv"))
    assert len(kernels) == 11
    gemms = [k for k in kernels if k.name.startswith("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA")]
    assert [k.name.rsplit("_", 1)[-1] for k in gemms] == ["TNT", "NNT", "NNT"]  # forward (with bias), two backward
    assert [round(k.duration_s * 1e9) for k in gemms] == [46784, 42848, 47520]
    assert [k.sm_pct for k in gemms] == pytest.approx([82.25, 82.98, 75.62])
    assert [k.dram_pct for k in gemms] == pytest.approx([19.74, 21.53, 14.42])
    # the largest add (the 4096x4096 weight-gradient accumulation of that run) is the one DRAM-heavy kernel
    add = max((k for k in kernels if "CUDAFunctor_add" in k.name), key=lambda k: k.duration_s)
    assert add.duration_s == pytest.approx(23.072e-6)
    assert (add.sm_pct, add.dram_pct) == pytest.approx((15.33, 72.27))
    assert sum(k.duration_s for k in kernels) == pytest.approx(201.600e-6)  # 11 kernels, 201.6 us of device time
    verdict = classify_kernels(kernels)
    assert verdict.bound == COMPUTE_BOUND and verdict.rule.startswith("grey zone")
    assert (verdict.sm_pct, verdict.memory_pct, verdict.dram_pct) == pytest.approx((62.62, 55.66, 23.45), abs=0.01)
