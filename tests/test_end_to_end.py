"""End-to-end behaviour of ``pytest --gpuperf`` through pytester, on the real CPU backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

PERF_TEST = """
import torch

torch.set_num_threads(1)  # two threads on a shared 2-core runner swing several-fold with the neighbours' load

WORK = {work}
ALLOC_MIB = {alloc}

def test_scaled_matmul(gpuperf):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(192, 192, generator=gen)

    def step():
        out = a
        for _ in range(WORK):
            out = torch.tanh(out @ a)
        scratch = torch.rand(ALLOC_MIB * 262144, generator=gen)
        return out.sum() + scratch.sum()

    # The declared work stays that of one matmul: more WORK is the same declared work getting slower (a changed
    # count would be reported as a changed workload instead, pytest_gpuperf.judging.work).
    gpuperf.measure(step, items=192, unit="rows", flops=2 * 192**3, bytes_moved=3 * 192 * 192 * 4)
"""


def write_perf_test(pytester: pytest.Pytester, work: int = 1, alloc: int = 1) -> None:
    pytester.makepyfile(test_perf=PERF_TEST.format(work=work, alloc=alloc))


def baseline_files(pytester: pytest.Pytester) -> list[Path]:
    return sorted((pytester.path / "baselines").glob("*.yaml"))


def test_recording_then_an_unchanged_run_passes(
    pytester: pytest.Pytester, fast_args: list[str], unchanged_args: list[str]
) -> None:
    write_perf_test(pytester)
    recorded = pytester.runpytest("--gpuperf-update", *fast_args)
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*baselines recorded in:*cpu-*.yaml*"])
    [path] = baseline_files(pytester)
    data = yaml.safe_load(path.read_text())
    assert data["schema_version"] == 1
    assert data["fingerprint"]["backend"] == "cpu"
    metrics = data["tests"]["test_perf.py::test_scaled_matmul[cpu]"]
    assert metrics["step.peak_memory"]["value"] >= 2**20
    assert len(metrics["step.time"]["samples"]) >= 3
    assert "samples" not in metrics["step.throughput"]  # derived from the time samples when read
    # Unchanged code on a loaded 2-core VM: a fresh process ran it 2.04x slower at a 2x tolerance (CI, 3 Dec), so
    # its time must not decide here (unchanged_args: 4x); peak memory and the counted work are exact.
    again = pytester.runpytest("--gpuperf", "-v", *unchanged_args)
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*gpuperf summary*", "*peak memory*ok*"])


def test_a_step_doing_much_more_work_fails_naming_the_throughput(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    write_perf_test(pytester, work=1)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    write_perf_test(pytester, work=12)
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*throughput -*% < -20.0% (*x slower, tolerance 25%)*",  # the short reason comes first
            "*throughput * < baseline * (-*%, 95% CI*tolerance 25%) on *",
            "*pytest --gpuperf --gpuperf-update*test_scaled_matmul*",
        ]
    )


def test_a_step_allocating_much_more_memory_fails_naming_peak_memory(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    write_perf_test(pytester, alloc=1)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    write_perf_test(pytester, alloc=8)
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_cpu_time_tolerance=5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*peak memory * MiB > baseline * MiB (+*%, tolerance 5%) on *"])


def test_no_baseline_for_this_hardware_reports_how_to_record_and_passes(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    write_perf_test(pytester)
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*no baseline*", "*have no baseline for this hardware; record them with:*", "*--gpuperf-update*"]
    )
    assert baseline_files(pytester) == []


def test_strict_mode_fails_a_test_without_baseline(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    write_perf_test(pytester)
    result = pytester.runpytest("--gpuperf", "--gpuperf-strict", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no baseline on * (--gpuperf-strict)*"])


def test_a_baseline_from_other_hardware_is_never_used(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    write_perf_test(pytester)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = baseline_files(pytester)
    other = path.with_name("cuda-nvidia-l4-sm-89-22gib-ws1.yaml")
    data = yaml.safe_load(path.read_text())
    data["fingerprint"].update(backend="cuda", device_name="NVIDIA L4", arch="sm_89", memory_gib=22)
    for metrics in data["tests"].values():
        metrics["step.peak_memory"]["value"] = 1  # would fail if it were ever compared
    other.write_text(yaml.safe_dump(data))
    path.unlink()
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*no baseline*"])


def test_malformed_baseline_is_a_clear_error_and_is_left_untouched(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    write_perf_test(pytester)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = baseline_files(pytester)
    broken = path.read_text().replace("tests:", "tests: [unclosed", 1)
    path.write_text(broken)
    for args in (["--gpuperf"], ["--gpuperf-update"]):
        result = pytester.runpytest(*args, *fast_args)
        assert result.ret != 0
        result.stdout.fnmatch_lines([f"*{path.name}:*not valid YAML*left untouched*"])
        assert path.read_text() == broken


def test_wrong_schema_version_names_the_file_and_line(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    write_perf_test(pytester)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = baseline_files(pytester)
    text = path.read_text().replace("schema_version: 1", "schema_version: 99")
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("schema_version"))
    result = pytester.runpytest("--gpuperf", *fast_args)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        [f"*{path.name}:{line}: schema_version 99 was written by a newer pytest-gpuperf; this one reads version 1*"]
    )


def test_update_keeps_entries_of_tests_that_did_not_run(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(
        test_two="""
        import torch
        def _step():
            return torch.randn(64, 64) @ torch.randn(64, 64)
        def test_first(gpuperf):
            gpuperf.measure(_step)
        def test_second(gpuperf):
            gpuperf.measure(_step)
        """
    )
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=2)
    [path] = baseline_files(pytester)
    before = yaml.safe_load(path.read_text())["tests"]
    # gpuperf_update_all: rewrite test_first's entries even where they stayed within tolerance
    pytester.runpytest("-o", "gpuperf_update_all=true", *fast_args, "-k", "first").assert_outcomes(passed=1)
    after = yaml.safe_load(path.read_text())["tests"]
    assert set(after) == {"test_two.py::test_first[cpu]", "test_two.py::test_second[cpu]"}
    assert after["test_two.py::test_second[cpu]"] == before["test_two.py::test_second[cpu]"]
    assert after["test_two.py::test_first[cpu]"] != before["test_two.py::test_first[cpu]"]


def test_unknown_backend_is_a_usage_error_listing_the_known_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--gpuperf", "--gpuperf-backend", "cpu,nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-backend: unknown backend 'nosuch'; known backends: cuda, mps, vulkan, cpu*"]
    )


def test_without_gpuperf_each_step_runs_once_as_a_smoke_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_smoke="""
        import torch
        CALLS = []
        def test_smoke(gpuperf):
            def step():
                CALLS.append(1)
                return torch.randn(8, 8).sum()
            m = gpuperf.measure(step)
            assert m.smoke and not m.metrics
            assert len(CALLS) == 1
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "gpuperf summary" not in result.stdout.str()


def test_record_judges_a_custom_metric_in_its_direction(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    source = """
    def test_custom(gpuperf):
        gpuperf.record("script.tokens_per_s", {value}, "tokens/s", better="higher")
    """
    pytester.makepyfile(test_custom=source.format(value=1000.0))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_custom=source.format(value=1020.0))
    pytester.runpytest("--gpuperf", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_custom=source.format(value=800.0))
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*script: tokens per s 800 tokens/s < baseline 1.00 ktokens/s (-20.0%, tolerance 5%)*"]
    )


def test_an_integer_count_recorded_as_equal_is_exact_and_a_word_is_stored_as_equal(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    source = """
    def test_count(gpuperf):
        gpuperf.record("params", {count}, better="equal")
        gpuperf.record("dtype", "bfloat16")
    """
    pytester.makepyfile(test_count=source.format(count=1_000_000))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").glob("*.yaml")
    assert "better: equal" in path.read_text().split("dtype:", 1)[1]  # a category compares for equality
    pytester.makepyfile(test_count=source.format(count=1_000_001))  # one parameter more: well inside 5%
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*params*tolerance 0%*"])


def test_marker_tolerance_overrides_the_default(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    source = """
    import pytest
    @pytest.mark.gpuperf(tolerance=0.5)
    def test_custom(gpuperf):
        gpuperf.record("custom.latency", {value}, "s")
    """
    pytester.makepyfile(test_custom=source.format(value=1.0))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_custom=source.format(value=1.4))
    pytester.runpytest("--gpuperf", *fast_args).assert_outcomes(passed=1)


def test_unknown_marker_argument_is_a_clear_error(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest
        @pytest.mark.gpuperf(tolerence=0.1)
        def test_bad(gpuperf):
            pass
        """
    )
    result = pytester.runpytest("--gpuperf", *fast_args)
    result.assert_outcomes(errors=1)
    expected = "*@pytest.mark.gpuperf got unknown argument(s) ?'tolerence'? (did you mean tolerance?); known:*"
    result.stdout.fnmatch_lines([expected])


def test_ini_twins_configure_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpuperf = true
        gpuperf_baselines = perf-baselines
        gpuperf_update = true
        gpuperf_max_time = 0.2
        gpuperf_min_samples = 3
        gpuperf_processes = 1
        """
    )
    pytester.makepyfile(
        test_ini="""
        import torch
        def test_ini(gpuperf):
            gpuperf.measure(lambda: torch.randn(32, 32) @ torch.randn(32, 32))
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert list((pytester.path / "perf-baselines").glob("cpu-*.yaml"))


def test_markers_are_registered_so_strict_markers_passes_with_the_plugin_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest
        @pytest.mark.gpuperf(tolerance=0.1)
        @pytest.mark.gpuperf_backends("cpu")
        def test_m():
            pass
        """
    )
    pytester.runpytest("--strict-markers", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.gpuperf(*", "*@pytest.mark.gpuperf_backends(*names)*"])


@pytest.mark.default_backends
def test_declared_but_absent_backend_is_skipped_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_mps_only="""
        import pytest
        @pytest.mark.gpuperf_backends("mps")
        def test_mps_only(gpuperf):
            pass
        """
    )
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*mps backend not available: *"])


def test_informational_metrics_are_recorded_and_shown_but_never_fail(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    source = PERF_TEST.replace(
        "def test_scaled_matmul(gpuperf):",
        "import pytest\n\n"
        "@pytest.mark.gpuperf(informational={{'cpu': ('peak_memory', 'throughput', 'bound')}})\n"
        "def test_scaled_matmul(gpuperf):",
    )
    pytester.makepyfile(test_perf=source.format(work=1, alloc=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = baseline_files(pytester)
    assert "step.peak_memory" in yaml.safe_load(path.read_text())["tests"]["test_perf.py::test_scaled_matmul[cpu]"]
    pytester.makepyfile(test_perf=source.format(work=1, alloc=8))
    result = pytester.runpytest("--gpuperf", "-v", *fast_args)  # 8x the memory and much slower: neither fails
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*throughput * krows/s * krows/s * -", "*peak memory * MiB * MiB * -"])
