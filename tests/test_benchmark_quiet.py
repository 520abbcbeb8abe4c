"""pytest-benchmark prints and creates nothing unless a test uses its ``benchmark`` fixture (issue 23)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_benchmark")

FLAGS = ["-p", "no:cacheprovider", "-p", "no:randomly"]


def test_a_run_without_the_benchmark_fixture_shows_no_header_and_leaves_no_benchmarks_folder(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    for args in ([], ["--gpuperf"]):
        result = pytester.runpytest(*FLAGS, *args)
        result.assert_outcomes(passed=1)
        assert "benchmark: " not in result.stdout.str()
        assert not (pytester.path / ".benchmarks").exists()


def test_a_user_of_the_fixture_sees_its_header_after_collection_and_keeps_its_folder(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_bench="def test_bench(benchmark):\n    benchmark(sum, [1, 2, 3])\n")
    result = pytester.runpytest(*FLAGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["collected 1 item", "benchmark: * (defaults: timer=*"])
    assert (pytester.path / ".benchmarks").is_dir()  # pytest-benchmark's own behaviour, untouched


def test_a_benchmarks_folder_that_existed_before_the_run_is_left_alone(pytester: pytest.Pytester) -> None:
    (pytester.path / ".benchmarks").mkdir()
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.runpytest(*FLAGS).assert_outcomes(passed=1)
    assert (pytester.path / ".benchmarks").is_dir()
