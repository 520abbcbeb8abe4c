"""One rule for the flags that need ``--gpuperf``, and the hints a new user needs: a flag that means something only
under ``--gpuperf`` without it is a usage error (the recording flags turn it on); tolerances >= 1 and perf tests
that measure nothing warn; a misspelt marker keyword names the closest one; ``--markers`` lists every keyword."""

from __future__ import annotations

import json

import pytest

STEP = """
def test_step(gpuperf):
    gpuperf.measure(lambda: sum(range(100)))
"""


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--gpuperf-strict"], "--gpuperf-strict"),
        (["--gpuperf-json", "r.json"], "--gpuperf-json r.json"),
        (["--gpuperf-markdown", "r.md"], "--gpuperf-markdown r.md"),
        (["-o", "gpuperf_plot=plots"], "-o gpuperf_plot=plots"),
        (["--gpuperf-baseline-ref", "main"], "--gpuperf-baseline-ref main"),
        (["--gpuperf-profile"], "--gpuperf-profile"),
        (["--gpuperf-ncu"], "--gpuperf-ncu"),
        (["-o", "gpuperf_json=r.json"], "-o gpuperf_json=r.json"),
        (["--gpuperf-ab", "HEAD"], "--gpuperf-ab HEAD"),
    ],
)
def test_a_flag_that_needs_gpuperf_without_it_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, args: list[str], shown: str
) -> None:
    pytester.makepyfile(STEP)
    result = pytester.runpytest(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {shown} *without --gpuperf*add --gpuperf (pytest --gpuperf {shown})"])
    assert not list(pytester.path.glob("r.*")) and not (pytester.path / "plots").exists()


def test_bisect_without_gpuperf_stops_git_bisect_run_instead_of_marking_the_commit_bad(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(STEP)
    result = pytester.runpytest("--gpuperf-bisect", "-p", "no:cacheprovider")
    assert result.ret == 128  # git bisect run: 1..127 but 125 is "bad", above 127 aborts
    result.stderr.fnmatch_lines(["*--gpuperf-bisect *add --gpuperf (pytest --gpuperf --gpuperf-bisect)*"])


def test_off_values_and_the_ini_file_never_err(pytester: pytest.Pytester) -> None:
    """A project's pytest.ini may set these for every run, measured or not; ``-o key=false`` turns a flag off."""
    pytester.makeini(
        "[pytest]\ngpuperf_plot = plots\ngpuperf_strict = true\n"
        "addopts = --gpuperf-json r.json -o gpuperf_markdown=r.md\n"
    )
    pytester.makepyfile(STEP)
    result = pytester.runpytest("-o", "gpuperf_ncu=false", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "r.json").exists()  # nothing measured, nothing written


@pytest.mark.parametrize(
    "recording", [["--gpuperf-update"], ["--gpuperf-accept-slower"], ["-o", "gpuperf_update_all=1"]]
)
def test_the_recording_flags_turn_gpuperf_on(pytester: pytest.Pytester, fast_args: list[str], recording) -> None:
    pytester.makepyfile(STEP)
    result = pytester.runpytest(*recording, *fast_args, "--gpuperf-json", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert "step.time" in json.dumps(report)
    assert list((pytester.path / "baselines").glob("*.yaml"))


def test_a_tolerance_of_one_or_more_warns_that_tolerances_are_fractions_and_is_kept(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(time_tolerance=10, memory_tolerance={"cpu": 2}, tolerances={"step.time": 0.5})
        def test_step(gpuperf):
            gpuperf.measure(lambda: sum(range(100)))
        """
    )
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_cpu_time_tolerance=3", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    flat = " ".join(result.stdout.str().split())
    assert (
        "GpuperfWarning: gpuperf_cpu_time_tolerance = 3: tolerances are fractions (0.05 = 5%), so 3 is read as"
        " +300%; if you meant 3%, write 0.03" in flat
    )
    assert (
        "@pytest.mark.gpuperf(time_tolerance=10): tolerances are fractions (0.05 = 5%), so 10 is read as +1000%" in flat
    )
    assert "@pytest.mark.gpuperf(memory_tolerance={'cpu': 2}): tolerances are fractions" in flat
    assert flat.count("tolerances are fractions") == 3  # tolerances={"step.time": 0.5} is a fraction: no warning
    plain = pytester.runpytest("-p", "no:cacheprovider")  # without --gpuperf the tolerances gate nothing
    plain.assert_outcomes(passed=1)
    assert "tolerances are fractions" not in plain.stdout.str()


def test_a_perf_test_that_measures_nothing_warns_under_gpuperf(pytester: pytest.Pytester, fast_args) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_forgot(gpuperf):
            x = sum(range(10))

        @pytest.mark.gpuperf(time_tolerance=0.5)
        def test_marked_only():
            pass

        def test_records(gpuperf):
            gpuperf.record("answer", 42, "", better="equal")

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("--gpuperf", *fast_args, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, warnings=2)
    flat = " ".join(result.stdout.str().split())
    assert "test_forgot[cpu] uses the gpuperf fixture but never called gpuperf.measure() or gpuperf.record()" in flat
    assert "test_marked_only is marked @pytest.mark.gpuperf but does not use the gpuperf fixture" in flat
    assert pytester.runpytest("-p", "no:cacheprovider").parseoutcomes().get("warnings") is None  # smoke run: quiet


def test_a_misspelt_marker_keyword_names_the_closest_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(time_tolerence=0.1)
        def test_step(gpuperf):
            gpuperf.measure(lambda: None)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    hint = "unknown argument(s) ['time_tolerence'] (did you mean time_tolerance?)"
    assert hint in " ".join(result.stdout.str().split())


def test_markers_lists_every_keyword_the_gpuperf_marker_accepts(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.markers import GPUPERF_MARKER_ARGS

    result = pytester.runpytest("--markers")
    line = next(row for row in result.stdout.lines if row.startswith("@pytest.mark.gpuperf("))
    assert "host_tolerance=None" in line
    for key in GPUPERF_MARKER_ARGS:
        assert f"{key}=None" in line, key
