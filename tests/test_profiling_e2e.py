"""``pytest --gpuperf`` with the profiling feature, end to end through pytester on the real CPU backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_gpuperf.backends.cpu import CpuBackend
from pytest_gpuperf.profiling.roof_store import CACHE_PREFIX, RoofStore, cache_key
from pytest_gpuperf.profiling.roofline import BOUNDS
from pytest_gpuperf.profiling.roofs import RoofProvider

STEPS = """
import os
import time

import pytest
import torch

gen = torch.Generator().manual_seed(0)
A = torch.randn(1024, 1024, generator=gen)
B = torch.randn(1024, 1024, generator=gen)
X = torch.randn(64, generator=gen)


def sleepy():
    time.sleep(0.003)
    return X + 1


def matmul():
    return A @ B


def test_step(gpuperf):
    gpuperf.measure(matmul if os.environ.get("STEP_KIND") == "matmul" else sleepy)


@pytest.mark.gpuperf(bound="compute")
def test_expects_compute(gpuperf):
    gpuperf.measure(sleepy)


def test_profiled_by_fixture(gpuperf, gpuperf_profile):
    gpuperf.measure(sleepy, name="tiny")
    [record] = gpuperf_profile
    assert record.artifacts and record.artifacts[0].exists()
"""


class MemoryCache:
    """Collects what the provider stores (pytest's ``config.cache`` get/set interface)."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key: str, default: object) -> object:
        return self.values.get(key, default)

    def set(self, key: str, value: object) -> None:
        self.values[key] = json.loads(json.dumps(value))


@pytest.fixture(scope="module")
def roofs_cache() -> dict[str, object]:
    """The CPU's measured roofs, calibrated once for this module and put in each pytester project's pytest cache."""
    backend = CpuBackend()
    cache = MemoryCache()
    RoofProvider(RoofStore(cache)).roofs(backend, backend.fingerprint() | {"world_size": 1}, "float32")
    return cache.values


@pytest.fixture
def fast_args(fast_args: list[str]) -> list[str]:
    """The fast flags with pytest's cache provider on: the roofs live in it."""
    args = list(fast_args)
    at = args.index("no:cacheprovider")
    return args[: at - 1] + args[at + 1 :]


@pytest.fixture
def project(pytester: pytest.Pytester, roofs_cache: dict[str, object]) -> pytest.Pytester:
    """A pytester project with the perf tests above and this machine's measured roofs in its pytest cache."""
    pytester.makepyfile(test_steps=STEPS)
    for key, value in roofs_cache.items():
        path = pytester.path / ".pytest_cache" / "v" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return pytester


def recorded_metrics(pytester: pytest.Pytester, node_id: str) -> dict[str, dict]:
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    return yaml.safe_load(path.read_text())["tests"][node_id]


def test_profiling_lines_follow_pytest_verbosity(project: pytest.Pytester, fast_args) -> None:
    """Each test's analytic verdict line is shown with -v; a default run that flags nothing stays quiet."""
    quiet = project.runpytest("--gpuperf-update", *fast_args, "test_steps.py::test_step")
    quiet.assert_outcomes(passed=1)
    assert "analytic " not in quiet.stdout.str()
    loud = project.runpytest("--gpuperf", "-v", *fast_args, "test_steps.py::test_step")
    loud.assert_outcomes(passed=1)
    loud.stdout.fnmatch_lines(["*gpuperf profiling*", "*analytic *-bound: AI*"])


def test_gpuperf_records_a_bound_with_its_numbers_in_the_baseline(project: pytest.Pytester, fast_args) -> None:
    result = project.runpytest("--gpuperf-update", "-v", *fast_args, "test_steps.py::test_step")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gpuperf profiling*", "*analytic latency-bound: AI*roof share*"])
    metrics = recorded_metrics(project, "test_steps.py::test_step[cpu]")
    assert metrics["step.bound"]["value"] in BOUNDS
    assert metrics["step.bound"]["kind"] == "category"
    assert metrics["step.roof_share"]["value"] < 0.3
    assert "step.arithmetic_intensity" in metrics


def test_a_changed_bound_fails_the_test_naming_both_classes(
    project: pytest.Pytester, fast_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    low = ["-o", "gpuperf_latency_share=0.05"]  # a 1024 matmul reaches far more than 5% of the CPU's matmul roof
    monkeypatch.setenv("STEP_KIND", "matmul")
    project.runpytest("--gpuperf-update", *fast_args, *low, "test_steps.py::test_step").assert_outcomes(passed=1)
    assert recorded_metrics(project, "test_steps.py::test_step[cpu]")["step.bound"]["value"] == "compute-bound"
    monkeypatch.setenv("STEP_KIND", "sleep")
    result = project.runpytest("--gpuperf", *fast_args, *low, "test_steps.py::test_step")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*bound changed: compute-bound -> latency-bound on *",
            "*If this change is intended*",
            "*step]",  # the profile is attached to the failure's message
            "*analytic latency-bound: AI*",
        ]
    )


def test_a_bound_marker_mismatch_fails_with_the_numbers_and_top_ops(project: pytest.Pytester, fast_args) -> None:
    result = project.runpytest("--gpuperf", "--gpuperf-profile", *fast_args, "test_steps.py::test_expects_compute")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest-gpuperf: bound assertion failed*",
            "*step.bound is latency-bound but @pytest.mark.gpuperf(bound='compute') expects compute-bound: "
            "latency-bound: AI * vs ridge *roof share*",
            "*top CPU ops by self time over 3 calls:*",
        ]
    )


def test_profile_flag_writes_a_chrome_trace_per_step_and_prints_where(project: pytest.Pytester, fast_args) -> None:
    result = project.runpytest("--gpuperf", "--gpuperf-profile", *fast_args, "test_steps.py::test_step")
    result.assert_outcomes(passed=1)
    [trace] = sorted((project.path / "gpuperf-artifacts").glob("*.trace.json"))
    assert trace.name == "test_steps-test_step-cpu-step.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::add" for e in events)
    result.stdout.fnmatch_lines(
        [
            "*trace: *test_step-cpu-step.trace.json (open in https://ui.perfetto.dev)",
            "*profiling artifacts (1 file(s)) in: *",
        ]
    )


def test_the_fixture_turns_profiling_on_for_one_test_into_the_artifacts_dir(
    project: pytest.Pytester, fast_args
) -> None:
    node = "test_steps.py::test_profiled_by_fixture"
    result = project.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_artifacts=out/traces", node)
    result.assert_outcomes(passed=1)
    [trace] = (project.path / "out" / "traces").glob("*.trace.json")
    assert trace.name == "test_steps-test_profiled_by_fixture-cpu-tiny.trace.json"
    json.loads(trace.read_text())


def test_without_gpuperf_the_profile_flag_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest("--gpuperf-profile", "-p", "no:cacheprovider", "test_steps.py::test_step")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-profile profiles measured steps*add --gpuperf*"])
    assert not (project.path / "gpuperf-artifacts").exists()


def test_ncu_capture_is_skipped_with_the_reason_when_ncu_is_missing(
    project: pytest.Pytester, fast_args, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = project.path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ncu here, even on a machine that has one
    monkeypatch.delenv("GPUPERF_NCU", raising=False)
    result = project.runpytest("--gpuperf", "--gpuperf-ncu", *fast_args, "-rs", "test_steps.py::test_step")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*test_step*`ncu` is not on PATH*install Nsight Compute*"])


def test_ncu_marker_with_a_cpu_backend_notes_there_is_nothing_to_capture(
    project: pytest.Pytester, fast_args, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho 'ncu must not be started for a CPU backend' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GPUPERF_NCU", str(fake))
    project.makepyfile(
        test_marked="""
        import pytest, torch

        @pytest.mark.gpuperf_ncu
        def test_marked(gpuperf):
            x = torch.randn(64, generator=torch.Generator().manual_seed(0))
            gpuperf.measure(lambda: x * 2)
        """
    )
    result = project.runpytest("--gpuperf", *fast_args, "test_marked.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*note: ncu: backend cpu runs no CUDA kernels; nothing to capture*"])


def test_roofs_are_kept_in_pytest_cache_not_in_a_folder_users_commit(project: pytest.Pytester, fast_args) -> None:
    result = project.runpytest("--gpuperf", *fast_args, "test_steps.py::test_step", "-v")  # -v: roofs measured
    result.assert_outcomes(passed=1)
    assert not (project.path / ".gpuperf").exists()
    backend = CpuBackend()
    key = CACHE_PREFIX + cache_key(backend.fingerprint() | {"world_size": 1})
    assert (project.path / ".pytest_cache" / "v" / key).is_file()
    assert "measured roofs" not in result.stdout.str()  # read from the cache, not measured again


def test_a_share_above_the_roof_is_flagged_as_a_counting_error_in_the_report(
    project: pytest.Pytester, fast_args
) -> None:
    project.makepyfile(
        test_overcounted="""
        import torch

        def test_overcounted(gpuperf):
            x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
            gpuperf.measure(lambda: x * 2, bytes_moved=1e15)  # a petabyte per call: impossible
        """
    )
    result = project.runpytest("--gpuperf", *fast_args, "-rA", "-v", "test_overcounted.py")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "roof share over 100%, not shown" in text
    assert "counting error: the counted bytes give" in text and "pass measure(bytes_moved=...)" in text
    assert "counting error (>100%)" in text  # the roof_share row of the metric table
    assert "re-measured after a step beat it" in text  # the roof was measured again before the flag
    recorded = project.runpytest("--gpuperf-update", *fast_args, "test_overcounted.py")
    recorded.assert_outcomes(passed=1)  # a flagged share is recorded as a word, not refused as a number
    entry = recorded_metrics(project, "test_overcounted.py::test_overcounted[cpu]")["step.roof_share"]
    assert entry["value"] == "counting error (>100%)" and entry["kind"] == "category"
