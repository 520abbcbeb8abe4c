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
from pytest_gpuperf.profiling.verdict import (
    COMPUTE_BOUND,
    LATENCY_BOUND,
    MEMORY_BOUND,
    classify_kernels,
    classify_sol,
    normalize_bound,
)

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
