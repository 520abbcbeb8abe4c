"""Roof calibration (best of several bandwidth patterns), the latency-line option, and the offline ncu sweep."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.profiling import roofs as roofs_module
from pytest_gpuperf.profiling.plugin import latency_share_option
from pytest_gpuperf.profiling.roofline import DEFAULT_LATENCY_SHARE, LATENCY_BOUND

ROOT = Path(__file__).resolve().parent.parent
#: The H200 calibration run of 1 Dec 2026 (gpu/roofline_calib.sh): 20 ops, analytic next to ncu.
RUN = ROOT / "tests" / "data" / "h200_roofline_calib.json"


def _sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("roofline_sweep", ROOT / "gpu" / "roofline_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("roofline_sweep", module)
    spec.loader.exec_module(module)
    return module


def test_the_dram_roof_is_the_best_of_copy_add_and_sum_each_the_best_of_its_tries() -> None:
    backend = CpuBackend()
    result = roofs_module.best_bandwidth(backend, roofs_module.DRAM_PATTERNS, 2**20, 1, tries=2)
    assert set(result["patterns"]) == {"copy", "add", "sum"}
    assert all(rate > 0 for rate in result["patterns"].values())
    assert result["bandwidth"] == max(result["patterns"].values())
    assert result["patterns"][result["pattern"]] == result["bandwidth"]


def test_each_pattern_counts_the_bytes_it_really_moves() -> None:
    size = 4096 * 4
    src = roofs_module._random(CpuBackend(), size, 8)
    assert src.numel() == 4096 and bool((src != 0).all())  # never all zeros
    for name, moved in (("copy", 2 * size), ("add", 3 * size), ("sum", size)):
        step, counted = roofs_module._pattern(name, src)
        step()
        assert counted == moved
    with pytest.raises(ValueError, match="unknown bandwidth pattern"):
        roofs_module._pattern("triad4", src)


def test_the_cache_roof_takes_the_best_pattern_and_size_and_a_cpu_launches_instead_of_graphing(monkeypatch) -> None:
    backend = CpuBackend()
    monkeypatch.setattr(roofs_module, "last_level_cache", lambda _backend: ("LLC", 2**20))
    sizes = []
    real = roofs_module.best_bandwidth

    def spy(backend, patterns, nbytes, iters, tries=roofs_module.TRIES, graph=False):  # type: ignore[no-untyped-def]
        sizes.append((patterns, nbytes, graph))
        return real(backend, patterns, nbytes, 2, 1, graph)  # graph=True on a CPU: launched, not captured

    monkeypatch.setattr(roofs_module, "best_bandwidth", spy)
    result = roofs_module.measure_cache_bandwidth(backend, tries=1)
    assert result is not None and result["cache_bytes"] == 2**20 and result["cache_name"] == "LLC"
    assert [s[1] for s in sizes] == [2**20 // 8, 2**20 // 4]  # a copy's two tensors: a quarter, then a half
    assert all(s[0] == ("copy", "sum") and s[2] for s in sizes)
    assert set(result["patterns"]) == {"copy", "sum"} and result["bandwidth"] == max(result["patterns"].values())


def test_the_latency_share_option_takes_auto_or_a_share() -> None:
    assert latency_share_option("auto") is None and latency_share_option(" AUTO ") is None
    assert latency_share_option("0.5") == 0.5 and latency_share_option("0") == 0.0
    for bad in ("1.5", "-0.1", "nan", "half"):
        with pytest.raises(pytest.UsageError, match=r"expected auto or a share in 0\.\.1"):
            latency_share_option(bad)


def test_the_offline_sweep_reproduces_the_runs_count_and_the_calibrated_lines() -> None:
    sweep = _sweep()
    data = json.loads(RUN.read_text())
    # the run's own verdicts were taken at 30%: re-judging at 30% must give the run's 13 of 20
    assert sum(row["bound"] == data["ncu"][name]["bound"] for name, row in data["analytic"].items()) == 13
    assert sweep.agreement(sweep.judged(data, 0.3), data["ncu"])[:2] == (13, 20)
    agree, total, off = sweep.agreement(sweep.judged(data, DEFAULT_LATENCY_SHARE), data["ncu"])
    assert (agree, total) == (15, 20)
    assert "bmm bf16 4096 x 64^3 (small batched)" not in off and "sdpa bf16 8x16x2048x128 causal" not in off
    floor = sweep.best_streaming(data["analytic"])
    assert floor == pytest.approx(4.37e12, rel=0.01)  # the add of 2^28 bf16: faster than the 4.23 TB/s copy roof
    assert sweep.agreement(sweep.judged(data, DEFAULT_LATENCY_SHARE, floor), data["ncu"])[:2] == (15, 20)
    best = max(sweep.agreement(sweep.judged(data, line), data["ncu"])[0] for line in sweep.SWEEP)
    assert best - agree <= 1  # the ncu-derived line is within one op of the best line of the sweep


def test_the_table_names_the_roof_each_share_is_taken_against() -> None:
    sweep = _sweep()
    data = json.loads(RUN.read_text())
    rows = sweep.judged(data, DEFAULT_LATENCY_SHARE)
    assert sweep.roof_used(rows["gemm bf16 8192^3"]) == "compute"
    assert sweep.roof_used(rows["add 2^28 bf16"]) == "DRAM"
    assert sweep.roof_used({**rows["add 2^21 fp32 (fits in L2)"], "roof_level": "L2"}) == "L2"
    text = "\n".join(sweep.table(rows, data["ncu"]))
    assert "| roof used |" in text and "Agreement: **15 of 20** ops (latency line 66%)" in text
    assert rows["bmm bf16 4096 x 64^3 (small batched)"]["bound"] == LATENCY_BOUND


def test_the_sweep_script_runs_from_the_json_and_refuses_a_broken_file(tmp_path: Path, capsys) -> None:
    sweep = _sweep()
    assert sweep.main([str(RUN), "--line", "0.3", "--dram-roof", "best-streaming"]) == 0
    out = capsys.readouterr().out
    assert "DRAM roof raised to the best streaming op of the run: 4.37 TB/s" in out
    assert "Agreement: **13 of 20** ops (latency line 30%)" in out and "| 66% | 15 of 20 |" in out
    broken = tmp_path / "broken.json"
    broken.write_text('{"analytic": {}}')
    assert sweep.main([str(broken)]) == 2
    assert "is not a roofline_calib.json" in capsys.readouterr().err
