"""``pytest --help`` / ``--markers`` with the plugin installed, option metavars, aliases and value checks."""

from __future__ import annotations

import pytest

SIMPLE_TEST = """
def test_plain():
    assert True
"""


def test_pytest_help_exits_0_and_lists_every_option_with_a_metavar(pytester: pytest.Pytester) -> None:
    """The plugin is loaded from its entry point (no conftest): ``--help`` used to crash on a bare ``%``."""
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()
    for shown in (
        "--gpuperf-baselines=DIR",
        "--gpuperf-backend=NAMES",
        "--gpuperf-json=PATH",
        "--gpuperf-markdown=PATH",
        "--gpuperf-plot=DIR",
        "--gpuperf-baseline-ref=REF",
        "--gpuperf-max-time=SECONDS",
        "--gpuperf-min-samples=N",
        "--gpuperf-time-tolerance=FRACTION",
        "--gpuperf-cuda-graph={auto,on,off}",
        "--gpuperf-cpu-clock={auto,thread,wall}",
        "--gpuperf-no-dist-pool",
        "(0.05 = 5%)",
    ):
        assert shown in text, shown
    assert "--gpuperf-json=N" not in text
    flat = " ".join(text.split())  # argparse wraps help lines
    for default in ("in seconds (default: 2.0)", "per measure() call (default: 30)", "(default: 0.25)"):
        assert default in flat, default  # defaults shown, as pytest's own options show theirs
    assert "--gpuperf-accept-slower like --gpuperf-update, and also write time/throughput entries" in flat
    assert "--gpuperf-dist-no-pool" not in text  # old spelling: works, but not advertised
    negatives = [w for w in text.split() if w.startswith("--gpuperf") and "-no-" in w]
    assert negatives and all(w.startswith("--gpuperf-no-") for w in negatives), negatives


def test_pytest_markers_exits_0_and_documents_the_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["@pytest.mark.gpuperf(*", "@pytest.mark.gpuperf_backends(*"])


def test_old_negative_flag_spelling_still_works(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    pytester.runpytest("--gpuperf-dist-no-pool", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.runpytest("--gpuperf-no-dist-pool", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_deprecated_no_reference_flag_still_parses_and_warns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf-no-reference", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*PytestDeprecationWarning: --gpuperf-no-reference has no effect*"])
    quiet = pytester.runpytest("-p", "no:cacheprovider")
    quiet.assert_outcomes(passed=1)
    assert "PytestDeprecationWarning" not in quiet.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpuperf-max-time", "-1"], "--gpuperf-max-time / gpuperf_max_time: expected a number > 0, got -1.0"),
        (["--gpuperf-min-samples", "0"], "--gpuperf-min-samples / gpuperf_min_samples: expected a number >= 1, got 0"),
        (["--gpuperf-time-tolerance", "-0.1"], "--gpuperf-time-tolerance / *: expected a number >= 0, got -0.1"),
        (["--gpuperf-memory-tolerance", "abc"], "--gpuperf-memory-tolerance / *: expected a float, got 'abc'"),
        (["--gpuperf-time-tolerance", "nan"], "--gpuperf-time-tolerance / *: expected a number >= 0, got nan"),
        (["--gpuperf-dist-timeout", "-1"], "--gpuperf-dist-timeout / *: expected a number > 0, got -1.0"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_flag_and_range(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf", *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_bad_ini_value_is_a_usage_error_naming_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpuperf_cpu_clock = sundial\n")
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-cpu-clock / gpuperf_cpu_clock: expected one of auto, thread, wall*"])


def test_a_choice_on_the_command_line_is_checked_at_start_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf-cuda-graph", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = "*--gpuperf-cuda-graph / gpuperf_cuda_graph: expected one of auto, on, off, got 'sometimes'"
    result.stderr.fnmatch_lines([expected])
