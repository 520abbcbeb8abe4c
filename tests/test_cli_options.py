"""``pytest --help`` / ``--markers`` with the plugin installed: a few flags, every other setting an ini key;
value checks; retired flags that still parse with a deprecation warning naming their ini key."""

from __future__ import annotations

import re

import pytest

SIMPLE_TEST = """
def test_plain():
    assert True
"""

#: The flags ``pytest --help`` lists: what a user chooses per run. Everything else is an ini key.
FLAGS = {
    "--gpuperf",
    "--gpuperf-update",
    "--gpuperf-bisect",
    "--gpuperf-accept-slower",
    "--gpuperf-backend",
    "--gpuperf-strict",
    "--gpuperf-json",
    "--gpuperf-markdown",
    "--gpuperf-ab",
    "--gpuperf-baseline-ref",
    "--gpuperf-profile",
    "--gpuperf-ncu",
}


def test_pytest_help_exits_0_and_lists_a_few_flags_and_every_ini_key(pytester: pytest.Pytester) -> None:
    """The plugin is loaded from its entry point (no conftest): ``--help`` used to crash on a bare ``%``."""
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()
    listed = set(re.findall(r"--gpuperf[a-z0-9-]*", text))
    assert listed == FLAGS and len(listed) <= 12, sorted(listed ^ FLAGS)
    for shown in ("--gpuperf-backend=NAMES", "--gpuperf-json=PATH", "--gpuperf-markdown=PATH", "(0.05 = 5%)"):
        assert shown in text, shown
    assert "--gpuperf-baseline-ref=REF" in text and "--gpuperf-ab=REF" in text
    assert "docs/options.md" in text  # the flags' group says where the other settings are
    flat = " ".join(text.split())  # argparse wraps help lines
    for ini_key in ("gpuperf_max_time (string):", "gpuperf_no_dist_pool (bool):", "gpuperf_plot (string):"):
        assert ini_key in flat, ini_key
    for default in ("in seconds (default: 2.0)", "per measure() call (default: 30)", "(default: 0.25)"):
        assert default in flat, default  # defaults shown, as pytest's own options show theirs
    assert "--gpuperf-accept-slower like --gpuperf-update, and also write time/throughput entries" in flat


def test_pytest_markers_exits_0_and_documents_the_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--markers")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["@pytest.mark.gpuperf(*", "@pytest.mark.gpuperf_backends(*"])


def test_a_retired_flag_still_parses_warns_with_its_ini_key_and_takes_effect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf-max-time", "0.5", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*PytestDeprecationWarning: --gpuperf-max-time is deprecated*set the ini key gpuperf_max_time*"]
    )
    assert "-o gpuperf_max_time=0.5" in " ".join(result.stdout.str().split())
    for args in (["--gpuperf-dist-no-pool"], ["--gpuperf-no-dist-pool"]):  # both old spellings of the bool
        old = pytester.runpytest(*args, "-p", "no:cacheprovider")
        old.assert_outcomes(passed=1, warnings=1)
        old.stdout.fnmatch_lines([f"*{args[0]} is deprecated*gpuperf_no_dist_pool*"])
    ini_keys = ["-o", "gpuperf_max_time=0.5", "-o", "gpuperf_no_dist_pool=true"]
    quiet = pytester.runpytest(*ini_keys, "-p", "no:cacheprovider")
    quiet.assert_outcomes(passed=1)
    assert "PytestDeprecationWarning" not in quiet.stdout.str()


def test_the_command_line_wins_over_the_ini_file(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.settings import get_option

    pytester.makeini("[pytest]\ngpuperf_max_time = 1.5\ngpuperf_no_confirm = false\n")
    assert get_option(pytester.parseconfig(), "gpuperf_max_time") == 1.5
    assert get_option(pytester.parseconfig("-o", "gpuperf_max_time=0.9"), "gpuperf_max_time") == 0.9
    retired = pytester.parseconfig("-o", "gpuperf_max_time=0.9", "--gpuperf-max-time", "0.7", "--gpuperf-no-confirm")
    assert get_option(retired, "gpuperf_max_time") == 0.7 and get_option(retired, "--gpuperf-max-time") == 0.7
    assert get_option(retired, "gpuperf_no_confirm") is True


def test_the_dead_no_reference_flag_is_gone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf-no-reference", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --gpuperf-no-reference*"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "gpuperf_max_time=-1"], "gpuperf_max_time: expected a number > 0, got -1.0"),
        (["-o", "gpuperf_min_samples=0"], "gpuperf_min_samples: expected a number >= 1, got 0"),
        (["-o", "gpuperf_time_tolerance=-0.1"], "gpuperf_time_tolerance: expected a number >= 0, got -0.1"),
        (["-o", "gpuperf_memory_tolerance=abc"], "gpuperf_memory_tolerance: expected a float, got 'abc'"),
        (["-o", "gpuperf_time_tolerance=nan"], "gpuperf_time_tolerance: expected a number >= 0, got nan"),
        (["-o", "gpuperf_dist_timeout=-1"], "gpuperf_dist_timeout: expected a number > 0, got -1.0"),
        (["--gpuperf-max-time", "-1"], "--gpuperf-max-time / gpuperf_max_time: expected a number > 0, got -1.0"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_key_and_range(
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
    result.stderr.fnmatch_lines(["*gpuperf_cpu_clock: expected one of auto, thread, wall, got 'sundial'*"])


def test_a_choice_on_the_command_line_is_checked_at_start_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SIMPLE_TEST)
    result = pytester.runpytest("--gpuperf-cuda-graph", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = "*--gpuperf-cuda-graph / gpuperf_cuda_graph: expected one of auto, on, off, got 'sometimes'"
    result.stderr.fnmatch_lines([expected])
    result = pytester.runpytest("-o", "gpuperf_cuda_graph=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpuperf_cuda_graph: expected one of auto, on, off, got 'sometimes'"])


def test_options_given_to_the_controller_reach_the_ab_workers_as_ini_keys(pytester: pytest.Pytester) -> None:
    """A/B workers get the controller's options (its retired flags too) as ``-o key=value``, flags as flags."""
    from pytest_gpuperf.ab.sides import forwarded_flags

    config = pytester.parseconfig(
        "--gpuperf-backend", "cpu", "--gpuperf-cpu-threads", "2", "-o", "gpuperf_l2_flush=true", "--gpuperf-profile"
    )
    assert forwarded_flags(config) == [
        "--gpuperf-backend",
        "cpu",
        "-o",
        "gpuperf_cpu_threads=2",
        "-o",
        "gpuperf_l2_flush=true",
        "--gpuperf-profile",
    ]
