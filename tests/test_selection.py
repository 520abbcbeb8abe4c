"""Per-backend markers and ``--gpuperf-backend``: parametrized ids, skip reasons, usage errors, ``--markers``."""

from __future__ import annotations

import pytest

from pytest_gpuperf.backends.selection import BackendParam, plan_backends

MULTI_BACKEND_TEST = """
import pytest

@pytest.mark.gpuperf_backends("vulkan", "mps", "cpu")
def test_kernel(gpuperf):
    assert gpuperf.backend_name in ("vulkan", "mps", "cpu")
"""


@pytest.mark.default_backends
def test_marked_test_runs_once_per_available_backend_with_the_backend_in_its_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MULTI_BACKEND_TEST)
    result = pytester.runpytest("-v", "-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*test_kernel[[]vulkan[]] PASSED*",
            "*test_kernel[[]mps[]] SKIPPED*",
            "*test_kernel[[]cpu[]] PASSED*",
            "*SKIPPED*mps backend not available: torch * was built without MPS*",
        ]
    )
    result.assert_outcomes(passed=2, skipped=1)


def test_gpuperf_backend_narrows_the_selection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MULTI_BACKEND_TEST)
    result = pytester.runpytest("-v", "--gpuperf-backend", "vulkan", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_kernel[[]vulkan[]] PASSED*"])
    result.assert_outcomes(passed=1)


def test_a_test_that_supports_none_of_the_selected_backends_is_skipped_saying_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf_backends("vulkan")
        def test_wgsl(gpuperf):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--gpuperf-backend", "cpu", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*SKIPPED*test supports vulkan; --gpuperf-backend selected cpu*"])
    result.assert_outcomes(skipped=1)


def test_unknown_backend_on_the_command_line_is_a_usage_error_listing_the_backends(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MULTI_BACKEND_TEST)
    result = pytester.runpytest("--gpuperf-backend", "nosuch", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-backend: unknown backend 'nosuch'; known backends: cuda, mps, vulkan, cpu*"]
    )


def test_unknown_backend_in_the_marker_is_a_usage_error_naming_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf_backends("vulkan", "opencl")
        def test_kernel(gpuperf):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*test_kernel: @pytest.mark.gpuperf_backends names unknown backend(s) [[]'opencl'[]]; known backends: *"]
    )


def test_markers_are_documented_in_pytest_markers(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.gpuperf(*): perf-test settings for pytest-gpuperf*",
            "@pytest.mark.gpuperf_backends(*names): backends this perf test supports*skipped with the reason*",
        ]
    )


def test_plan_for_an_unmarked_test_drops_absent_torch_backends_silently() -> None:
    plan = plan_backends(None, [])
    assert BackendParam("cpu") in plan
    assert all(p.skip_reason is None for p in plan)
    assert "vulkan" not in [p.name for p in plan]  # not a torch backend: only for tests that declare it


def test_plan_for_a_marked_test_keeps_absent_backends_as_skips_with_the_reason() -> None:
    plan = {p.name: p for p in plan_backends(("mps", "vulkan"), [])}  # no Metal on any Linux machine
    assert plan["vulkan"].skip_reason is None
    assert plan["mps"].skip_reason is not None and "mps backend not available" in plan["mps"].skip_reason


def test_backend_first_ids_of_older_baselines() -> None:
    from pytest_gpuperf.backends.selection import backend_first_id

    assert backend_first_id("t.py::test_x[64-cpu]", "cpu") == "t.py::test_x[cpu-64]"
    assert backend_first_id("t.py::test_x[a-b-cuda]", "cuda") == "t.py::test_x[cuda-a-b]"
    assert backend_first_id("t.py::test_x[cpu]", "cpu") is None
    assert backend_first_id("t.py::test_x[64-cuda]", "cpu") is None


def test_a_baseline_recorded_with_the_backend_first_in_the_id_is_still_found(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    import yaml

    pytester.makepyfile(
        test_old="""
        import pytest

        @pytest.mark.parametrize("n", [64])
        def test_x(gpuperf, n):
            gpuperf.record("script.latency", 1.0, "s")
        """
    )
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").glob("*.yaml")
    data = yaml.safe_load(path.read_text())
    data["tests"] = {"test_old.py::test_x[cpu-64]": data["tests"]["test_old.py::test_x[64-cpu]"]}  # the old key
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = pytester.runpytest("--gpuperf", "-v", *fast_args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*script: latency*1.00 s*1.00 s*+0.0%*ok*"])
    assert "no baseline" not in result.stdout.str()
