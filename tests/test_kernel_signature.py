"""Kernel signatures: one call's kernels (CUDA) or aten ops (CPU), stored with the baseline, explaining timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pytest_gpuperf.baselines.fields import entry_problem
from pytest_gpuperf.baselines.schema import BaselineError, parse_baseline_text
from pytest_gpuperf.baselines.update import entries_for
from pytest_gpuperf.judging.kernel_diff import explain_kernels, kernel_change
from pytest_gpuperf.results import KIND_TIME, Metric, Verdict, verdict_from_dict, verdict_to_dict
from pytest_gpuperf.timing.kernel_signature import KernelSignature, short_name, signature_of

#: Kernel names from real H200 runs (torch 2.11, CUDA 13): cuBLAS's nvjet GEMMs, cuDNN's flash attention.
NVJET_256 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
NVJET_192 = "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_NNT"
NVJET_288 = "nvjet_sm90_tst_288x128_64x3_1x2_h_bz_coopA_NNT"
FLASH_FPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1_kernel0_0"
FLASH_BPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
TRANSPOSE = "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)2>(int, int, int)"


def _kernel(name: str, start: int, ns: int, grid: str = "[66, 1, 1]", activity: str = "kernel") -> tuple:
    meta = f'"device": 0, "stream": 7, "grid": {grid}, "block": [384, 1, 1], "registers per thread": 168'
    return (name, "CUDA", activity, start, ns, 0, meta)


def _cuda_signature(kernels: list[tuple[str, int]]) -> KernelSignature:
    events = [_kernel(name, 1000 * i, ns) for i, (name, ns) in enumerate(kernels)]
    signature = signature_of(events, device=True)
    assert signature is not None
    return signature


def _entry(signature: KernelSignature) -> dict:
    return entries_for([signature.metric("step")])["step.kernels"]


def test_names_are_shortened_and_library_names_kept_whole() -> None:
    assert short_name(ADD) == "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, Array<char*, 3>>"
    assert short_name(TRANSPOSE) == "nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)2>"
    assert short_name(NVJET_256) == NVJET_256
    assert short_name(FLASH_FPROP) == FLASH_FPROP
    assert short_name("aten::addmm", device=False) == "aten::addmm"
    assert short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"
    assert len(short_name("k" * 300)) == 96


def test_the_signature_lists_kernels_by_share_with_launch_shapes_and_a_digest_of_names_not_times() -> None:
    signature = _cuda_signature([(NVJET_256, 900), (ADD, 50), (ADD, 50)])
    top = signature.rows[0]
    assert (top.name, top.calls, round(top.share, 2), top.grid, top.block) == (
        NVJET_256,
        1,
        0.9,
        (66, 1, 1),
        (384, 1, 1),
    )
    assert signature.rows[1].calls == 2 and signature.launches == 3
    assert _cuda_signature([(NVJET_256, 10), (ADD, 500), (ADD, 500)]).digest == signature.digest  # times differ
    assert _cuda_signature([(NVJET_192, 900), (ADD, 50), (ADD, 50)]).digest != signature.digest


def test_without_activity_types_a_record_function_span_on_the_gpu_is_not_a_kernel() -> None:
    """torch 2.11's events say no activity type: a CUDA event named like a CPU range is that range's GPU span."""
    events = [
        ("Optimizer.step#AdamW.step", "CPU", "", 0, 900, 1, ""),
        ("Optimizer.step#AdamW.step", "CUDA", "", 10, 800, 0, ""),
        (FLASH_BPROP, "CUDA", "", 20, 300, 0, ""),
    ]
    signature = signature_of(events, device=True)
    assert signature is not None and [row.name for row in signature.rows] == [FLASH_BPROP]


def test_cpu_ops_count_their_self_time_only() -> None:
    events = [
        ("aten::linear", "CPU", "cpu_op", 0, 100, 1, ""),
        ("aten::addmm", "CPU", "cpu_op", 10, 80, 1, ""),
        ("[memory]", "CPU", "cpu_instant_event", 15, 0, 1, ""),
        ("aten::relu", "CPU", "cpu_op", 120, 20, 1, ""),
    ]
    signature = signature_of(events, device=False)
    assert signature is not None
    assert {row.name: round(row.share, 2) for row in signature.rows} == {
        "aten::addmm": 0.67,
        "aten::linear": 0.17,
        "aten::relu": 0.17,
    }


def test_the_linear_width_change_is_a_kernel_switch() -> None:
    base = _entry(_cuda_signature([(NVJET_256, 930), (ADD, 70)]))
    run = _cuda_signature([(NVJET_192, 550), (NVJET_288, 380), (ADD, 70)]).metric("step")
    text, same = kernel_change({**run.extra, "digest": run.value}, base)
    assert not same
    assert text.startswith(f"kernel switch: {NVJET_256} -> ..._192x192_64x3_2x1_v_bz_coopB_NNT (55%) + ")
    assert "..._288x128_64x3_1x2_h_bz_coopA_NNT (38%)" in text


def test_a_layout_change_names_the_added_kernel_and_the_launch_count() -> None:
    conv = [(FLASH_FPROP, 400), (FLASH_BPROP, 500), (ADD, 100)]
    base = _entry(_cuda_signature(conv))
    run = _cuda_signature([*conv, (TRANSPOSE, 80)]).metric("step")
    text, _ = kernel_change({**run.extra, "digest": run.value}, base)
    assert text.startswith(
        "kernels added: nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)2> (7%)"
    )
    assert "3 -> 4 launches per step" in text


def test_a_kernel_outside_a_stored_top_list_is_not_called_added() -> None:
    many = [(f"kernel_{i:02d}", 100 - i) for i in range(12)]
    base = _entry(_cuda_signature(many))
    assert len(base["kernels"]) == 8 and base["distinct"] == 12
    grown = [(name, 99 if name == "kernel_11" else ns) for name, ns in many]  # stored beyond the top 8
    run = _cuda_signature([*grown, ("kernel_new", 98)]).metric("step")
    text, _ = kernel_change({**run.extra, "digest": run.value}, base)
    assert "kernels added" not in text
    assert text.startswith("new among the heaviest kernels: kernel_11 (")
    assert "kernel_new" in text


def _time(status: str, suspected: str = "") -> Verdict:
    metric = Metric("step.time", 2e-3, "s", "lower", KIND_TIME)
    return Verdict(
        metric, status, baseline=1e-3, ratio=2.0, message="step: time 2 ms > baseline 1 ms", suspected=suspected
    )


def _signature_verdict(signature: KernelSignature) -> Verdict:
    metric = signature.metric("step")
    return Verdict(metric, "info", baseline=None)


def test_a_slower_step_with_the_same_kernels_says_the_machine_may_have_moved() -> None:
    signature = _cuda_signature([(NVJET_256, 930), (ADD, 70)])
    entries = {"step.kernels": _entry(signature)}
    verdicts = explain_kernels([_time("regression"), _signature_verdict(signature)], entries)
    assert verdicts[0].message.endswith(
        f"same kernels as the baseline (signature {signature.digest}): the machine, not the code, may have moved"
    )
    assert verdicts[1].status == "info" and verdicts[1].message.startswith("kernels: same kernels")
    again = explain_kernels(verdicts, entries)  # a confirmation calls it again: said once
    assert again[0].message.count("same kernels") == 1


def test_only_failing_or_inconclusive_timing_is_explained_and_old_baselines_say_nothing() -> None:
    signature = _cuda_signature([(NVJET_256, 930)])
    other = _entry(_cuda_signature([(NVJET_192, 930)]))
    unchanged = _time("unchanged")
    verdicts = explain_kernels(
        [unchanged, _time("inconclusive", "regression"), _signature_verdict(signature)], {"step.kernels": other}
    )
    assert verdicts[0].message == unchanged.message
    assert verdicts[1].message.endswith(f"kernel switch: {NVJET_192} -> ..._256x128_64x4_1x2_h_bz_coopA_NNT (100%)")
    assert explain_kernels([_time("regression"), _signature_verdict(signature)], {})[0].message == _time("x").message


def test_the_entry_is_reviewable_and_validated() -> None:
    entry = _entry(_cuda_signature([(NVJET_256, 930), (ADD, 70)]))
    assert entry_problem(entry) is None
    assert entry["kernels"][0] == {
        "name": NVJET_256,
        "calls": 1,
        "share": 0.93,
        "grid": [66, 1, 1],
        "block": [384, 1, 1],
    }
    assert (entry["launches"], entry["distinct"], entry["source"], entry["kind"]) == (2, 2, "cuda kernels", "signature")
    assert "all_kernels" not in entry
    bad = {**entry, "kernels": [{**entry["kernels"][0], "share": 1.5}]}
    assert entry_problem(bad) == "kernels[0].share must be a fraction in 0..1, got 1.5"
    assert "hex digest" in str(entry_problem({**entry, "value": "not a digest"}))
    assert "unknown keys" in str(entry_problem({**entry, "kernels": [{"name": "k", "calls": 1, "share": 0.1, "t": 1}]}))


MALFORMED = """schema_version: 1
fingerprint: {backend: cpu, device_name: X}
tests:
  test_x.py::test_y[cpu]:
    step.kernels:
      value: 0123456789ab
      unit: ''
      better: equal
      kind: signature
      kernels:
      - name: aten::addmm
        calls: two
        share: 0.5
"""


def test_a_malformed_stored_signature_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"kernels\[0\]\.calls must be a whole number >= 1, got 'two'"):
        parse_baseline_text(tmp_path / "cpu-x.yaml", MALFORMED)
    good = MALFORMED.replace("calls: two", "calls: 2")
    assert parse_baseline_text(tmp_path / "cpu-x.yaml", good).tests["test_x.py::test_y[cpu]"]["step.kernels"]


def test_the_report_carries_the_kernels() -> None:
    signature = _cuda_signature([(NVJET_256, 930), (ADD, 70)])
    [verdict] = explain_kernels([_signature_verdict(signature)], {"step.kernels": _entry(signature)})
    data = json.loads(json.dumps(verdict_to_dict(verdict)))
    assert data["signature"]["kernels"][0]["name"] == NVJET_256
    assert data["signature"]["baseline_kernels"] == data["signature"]["kernels"]
    assert data["extra"]["kernel_change"].startswith("same kernels as the baseline")
    assert verdict_from_dict(data).metric.extra["launches"] == 2


def test_the_cpu_probe_reads_the_ops_from_the_peak_memory_call() -> None:
    from pytest_gpuperf.backends.cpu import CpuBackend

    x = torch.randn(32, 32, generator=torch.Generator().manual_seed(0))
    peak, plain = CpuBackend().peak_memory_and_signature(lambda: (x @ x).sum(), memory=True)
    _, more = CpuBackend().peak_memory_and_signature(lambda: (x @ x).relu().sum(), memory=False)
    assert peak is not None and peak > 0 and plain is not None and more is not None
    assert "aten::mm" in {row.name for row in plain.rows}
    assert {row.name for row in more.rows} - {row.name for row in plain.rows} >= {"aten::relu"}
    assert plain.digest != more.digest and plain.source == "cpu ops"


PERF_TEST = """
import os
import torch

EXTRA = os.environ.get("EXTRA_OP") == "1"


def test_step(gpuperf):
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(64, 64, generator=gen)
    big = torch.rand(20_000, generator=gen)

    def step():
        out = (a @ a).sum()
        if EXTRA:
            out = out + torch.sort(big).values[0]
        return out

    gpuperf.measure(step)
"""


def test_a_step_that_adds_an_op_names_it_in_the_report(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_perf=PERF_TEST)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [baseline] = (pytester.path / "baselines").glob("cpu-*.yaml")
    assert "kind: signature" in baseline.read_text() and "- name: aten::mm" in baseline.read_text()
    monkeypatch.setenv("EXTRA_OP", "1")
    result = pytester.runpytest(
        "--gpuperf", *fast_args, "-o", "gpuperf_no_confirm=true", "--gpuperf-json", "report.json"
    )
    result.stdout.fnmatch_lines(["*time * > baseline *kernels added: aten::sort (*"])
    report = json.loads((pytester.path / "report.json").read_text())
    metrics = {m["metric"]: m for m in report["gpuperf"]["tests"][0]["metrics"]}
    assert "aten::sort" in metrics["step.time"]["extra"]["kernel_change"]
    # The heaviest kernels are ordered by their share of the step's time, which load can reorder: mm is among them.
    assert "aten::mm" in {k["name"] for k in metrics["step.kernels"]["signature"]["baseline_kernels"]}
