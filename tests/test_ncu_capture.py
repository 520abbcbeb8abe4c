"""The ncu capture's command lines and its skip paths (ncu absent here; a fake ncu prints ncu's real errors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.profiling.ncu_capture import (
    ENV_OCCURRENCE,
    ENV_STEP,
    NcuUnavailable,
    capture_step,
    child_pytest_args,
    child_target,
    find_ncu,
    ncu_prefix,
)
from pytest_gpuperf.profiling.ncu_parse import SOL_METRICS

#: What ncu 2025.3 prints when the driver restricts the performance counters to admin users.
PERMISSION_ERROR = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def fake_ncu(folder: Path, body: str) -> Path:
    """An executable named ``ncu`` running ``body`` (a shell script)."""
    path = folder / "ncu"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_the_ncu_command_profiles_only_the_region_with_real_clocks(tmp_path: Path) -> None:
    command = ncu_prefix("ncu", tmp_path / "x.csv")
    text = " ".join(command)
    assert "--profile-from-start off" in text
    assert "--clock-control none" in text
    assert "--csv --page raw --print-units base" in text
    assert command[command.index("--metrics") + 1] == ",".join(SOL_METRICS)
    assert command[command.index("--log-file") + 1] == str(tmp_path / "x.csv")


def test_ncu_is_found_through_gpuperf_ncu_or_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPERF_NCU", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_ncu() is None
    fake = fake_ncu(tmp_path, "exit 0\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_ncu() == str(fake)
    monkeypatch.setenv("GPUPERF_NCU", str(tmp_path / "missing"))
    assert find_ncu() is None


def test_a_counter_permission_error_becomes_the_skip_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_ncu(tmp_path, f"echo '==PROF== Connected to process 4242'\necho '{PERMISSION_ERROR}'\nexit 1\n")
    with pytest.raises(NcuUnavailable, match="ncu cannot read GPU counters here: ==ERROR== ERR_NVGPUCTRPERM"):
        capture_step(str(fake), "test_x.py::test_y[cuda]", "step", 0, "cuda", tmp_path, tmp_path / "a" / "y.csv")


def test_a_library_load_failure_written_to_the_log_file_is_found(tmp_path: Path) -> None:
    # ncu writes its own messages to --log-file; the fake does the same with the text ncu prints
    script = (
        'while [ "$1" != "--log-file" ]; do shift; done\n'
        'echo "==ERROR== Failed to load library: LibraryNotLoaded (libnvperf_host.so)" > "$2"\nexit 1\n'
    )
    fake = fake_ncu(tmp_path, script)
    with pytest.raises(NcuUnavailable, match="LibraryNotLoaded"):
        capture_step(str(fake), "test_x.py::test_y[cuda]", "step", 0, "cuda", tmp_path, tmp_path / "y.csv")


def test_a_region_without_kernels_is_reported_not_parsed(tmp_path: Path) -> None:
    fake = fake_ncu(tmp_path, "echo '==WARNING== No kernels were profiled.'\nexit 0\n")
    with pytest.raises(NcuUnavailable, match=r"profiled no kernels in the region of test_x\.py::test_y"):
        capture_step(str(fake), "test_x.py::test_y[cuda]", "step", 0, "cuda", tmp_path, tmp_path / "y.csv")


def test_a_timeout_names_the_option_to_raise(tmp_path: Path) -> None:
    fake = fake_ncu(tmp_path, "sleep 5\n")
    with pytest.raises(NcuUnavailable, match="--gpuperf-ncu-timeout"):
        capture_step(str(fake), "t.py::t", "step", 0, "cuda", tmp_path, tmp_path / "y.csv", timeout=0.5)


def test_the_child_gets_its_target_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_STEP, raising=False)
    assert child_target() is None
    monkeypatch.setenv(ENV_STEP, "decode")
    monkeypatch.setenv(ENV_OCCURRENCE, "2")
    assert child_target() == ("decode", 2)


def test_the_child_command_is_a_valid_short_gpuperf_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        test_child="""
        import torch

        def test_child(gpuperf):
            x = torch.randn(32, generator=torch.Generator().manual_seed(0))
            m = gpuperf.measure(lambda: x * 2)
            assert m.metrics and gpuperf.enabled
        """
    )
    args = child_pytest_args("test_child.py::test_child[cpu]", "cpu", tmp_path / "baselines", xdist=True)
    done = subprocess.run(args, cwd=pytester.path, capture_output=True, text=True, timeout=300, check=False)
    assert args[:3] == [sys.executable, "-m", "pytest"]
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "baselines").exists()  # the child never writes baselines
