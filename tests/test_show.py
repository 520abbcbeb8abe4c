"""``gpuperf show NODEID``: one test's stored entries from every baseline file, each field with its meaning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.baselines.fields import ENTRY_FIELDS
from pytest_gpuperf.history.cli import main

NODE = "tests/test_model.py::test_forward[64-cpu]"
CPU_FILE = """schema_version: 1
fingerprint: {backend: cpu, device_name: AMD EPYC, arch: x86_64, memory_gib: 24, world_size: 1, torch: 2.13.0}
tests:
  tests/test_model.py::test_forward[64-cpu]:
    step.peak_memory: {value: 4194304, unit: B, better: lower, kind: memory}
    step.time:
      value: 0.0286
      unit: s
      better: lower
      kind: time
      samples: [0.0234, 0.0286, 0.0354]
      method: thread_cpu
      min_detectable_change: 0.4685
      process_spread: 0.1838
      processes: 3
  tests/test_model.py::test_forward[128-cpu]:
    step.time: {value: 0.05, unit: s, better: lower, kind: time}
"""
CUDA_FILE = """schema_version: 1
fingerprint: {backend: cuda, device_name: NVIDIA H200, arch: sm_90, memory_gib: 140, world_size: 1}
tests:
  tests/test_model.py::test_forward[64-cpu]:
    step.time: {value: 0.00123, unit: s, better: lower, kind: time, sm_clock_mhz: 1980, method: cuda_graph}
"""


@pytest.fixture
def baselines(tmp_path: Path) -> Path:
    folder = tmp_path / "baselines"
    folder.mkdir()
    (folder / "cpu-amd-epyc-x86-64-24gib-ws1.yaml").write_text(CPU_FILE)
    (folder / "cuda-nvidia-h200-sm-90-140gib-ws1.yaml").write_text(CUDA_FILE)
    (folder / "cpu-broken-ws1.yaml").write_text("schema_version: 1\ntests: [\n")
    return folder


def test_every_entry_field_has_a_one_line_meaning() -> None:
    for row in ENTRY_FIELDS:
        assert row.meaning and "\n" not in row.meaning, row.name


def test_show_prints_the_entries_of_every_file_with_formatted_values_and_each_fields_meaning(
    baselines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", NODE, "--baselines", str(baselines)]) == 0
    out, err = capsys.readouterr()
    assert "cpu-amd-epyc-x86-64-24gib-ws1.yaml: cpu, AMD EPYC, x86_64, 24 GiB, world size 1, torch 2.13.0" in out
    assert "cuda-nvidia-h200-sm-90-140gib-ws1.yaml: cuda, NVIDIA H200, sm_90, 140 GiB, world size 1" in out
    assert "  step.time = 28.6 ms  (kind time, lower is better)" in out
    assert "  step.peak_memory = 4.00 MiB  (kind memory, lower is better)" in out
    assert "  step.time = 1.23 ms  (kind time, lower is better)" in out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    for shown in (
        "samples 3 samples, 23.4 ms .. 35.4 ms",
        "process_spread 18.4%",
        "min_detectable_change 46.9%",
        "processes 3",
        "method thread_cpu",
        "sm_clock_mhz 1980 MHz",
    ):
        assert shown in lines, shown
    legend = out.split("what the fields mean:")[1]
    meanings = {row.name: row.meaning for row in ENTRY_FIELDS}
    for name in ("value", "kind", "better", "samples", "process_spread", "min_detectable_change", "sm_clock_mhz"):
        assert f"{name:<22} {meanings[name]}" in legend, name
    assert "test_forward[128-cpu]" not in out
    assert "skipped" in err and "cpu-broken-ws1.yaml" in err  # a malformed file is named, not fatal


def test_device_picks_the_files(baselines: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", NODE, "--baselines", str(baselines), "--device", "cuda-*"]) == 0
    out = capsys.readouterr().out
    assert "cuda-nvidia-h200" in out and "cpu-amd-epyc" not in out and "broken" not in out
    assert main(["show", NODE, "--baselines", str(baselines), "--device", "mps"]) == 2


def test_an_unknown_node_id_exits_2_with_the_closest_stored_ids(
    baselines: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "tests/test_model.py::test_forwad[64-cpu]", "--baselines", str(baselines)]) == 2
    err = capsys.readouterr().err
    assert "no entry for tests/test_model.py::test_forwad[64-cpu]" in err
    assert "  tests/test_model.py::test_forward[64-cpu]" in err
    assert main(["show", "tests/test_model.py::test_forward", "--baselines", str(baselines)]) == 2
    err = capsys.readouterr().err  # a test without its parameters: the stored instances
    assert "test_forward[128-cpu]" in err and "test_forward[64-cpu]" in err
    assert main(["show", NODE, "--baselines", str(baselines / "nowhere")]) == 2


def test_python_m_pytest_gpuperf_show_runs_the_command(baselines: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf", "show", NODE, "--baselines", str(baselines)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "step.time = 28.6 ms" in done.stdout
