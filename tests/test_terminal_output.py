"""Terminal output under --gpuperf: pytest's verbosity, the short summary's reason, checkable numbers, quiet torch."""

from __future__ import annotations

import pytest

from pytest_gpuperf.reporting.terminal import failure_longrepr, summary_line
from pytest_gpuperf.reporting.verdict_text import format_limit, short_fact, verdict_word

RECORDED = """
import pytest

VALUES = {values!r}
UNITS = {{"mem": ("B", "lower"), "rate": ("items/s", "higher"), "small": ("B", "lower"), "steady": ("s", "lower")}}

@pytest.mark.gpuperf(tolerances={{"step.rate": 0.5}})
@pytest.mark.parametrize("name", sorted(VALUES))
def test_metric(gpuperf, name):
    unit, better = UNITS[name]
    gpuperf.record("step." + name, VALUES[name], unit, better)
"""
BEFORE = {"mem": 1048576, "rate": 1000.0, "small": 65536, "steady": 1.0}
AFTER = {"mem": 1338000, "rate": 601.0, "small": 131072, "steady": 1.01}


def test_output_follows_pytest_verbosity_and_the_short_summary_carries_the_fact(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Baselines recorded with BEFORE, the test now records AFTER; judged at default, -v and -q verbosity."""
    monkeypatch.setenv("COLUMNS", "200")
    pytester.makepyfile(test_m=RECORDED.format(values=BEFORE))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=4)
    pytester.makepyfile(test_m=RECORDED.format(values=AFTER))
    judged = ["--gpuperf", *fast_args]

    # default: one summary line plus the rows that are not ok
    result = pytester.runpytest(*judged)
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*= gpuperf summary =*",
            "gpuperf: 4 tests, 4 metrics: 2 ok, 2 REGRESSION (*)",
            "*test_m.py::test_metric[[]mem-cpu[]]*mem*1.00 MiB*1.28 MiB*+27.6%*+5.0%*REGRESSION*",
            "*test_m.py::test_metric[[]rate-cpu[]]*rate*1.00 kitems/s*601 items/s*-39.9%*-33.3%*REGRESSION*",
            "*(every metric: pytest -v)*",
        ]
    )
    assert "steady-cpu]" not in out.split("gpuperf summary")[1]  # ok rows are not listed by default
    # pytest's short summary carries the fact, not a generic header
    result.stdout.fnmatch_lines(
        [
            "FAILED test_m.py::test_metric[[]mem-cpu[]] - mem +27.6% > +5.0% (1.00 MiB -> 1.28 MiB)",
            "FAILED test_m.py::test_metric[[]rate-cpu[]] - rate -39.9% < -33.3% (1.66x slower, tolerance 50%) *",
        ]
    )
    # one table (the summary's), not a second copy in the failure section
    assert out.count("metric  ") <= 1 and "gpuperf metrics" not in out

    # -v: every row, and the memory allowance stated where it decided
    verbose = pytester.runpytest(*judged, "-v")
    verbose.stdout.fnmatch_lines(
        [
            "test_m.py::test_metric[[]small-cpu[]]  [[]*[]]",
            "*small*64.00 KiB*128.00 KiB*+100.0%*+5.0%*ok (+64.00 KiB is within the 64.00 KiB allowance)*",
            "test_m.py::test_metric[[]steady-cpu[]]  [[]*[]]",
            "*steady*1.00 s*1.01 s*+1.0%*+5.0%*ok*",
        ]
    )

    # -q: the summary line only
    quiet = pytester.runpytest(*judged, "-q").stdout.str()
    assert "gpuperf: 4 tests, 4 metrics: 2 ok, 2 REGRESSION" in quiet
    assert "gpuperf summary" not in quiet and "every metric" not in quiet


def test_torch_profiler_and_sync_debug_noise_is_silenced_under_gpuperf(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    pytester.makepyfile(
        """
        import warnings
        import torch
        from torch.profiler import ProfilerActivity, profile

        def test_noisy(gpuperf):
            with profile(activities=[ProfilerActivity.CPU]):
                torch.ones(4) + 1
            warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all "
                          "synchronizing operations", UserWarning)
            gpuperf.record("x", 1.0, "s")
        """
    )
    plain = pytester.runpytest("-s", "-p", "no:cacheprovider")
    assert "USDT" in plain.stdout.str() + plain.stderr.str()  # torch's noise, shown without --gpuperf
    result = pytester.runpytest("--gpuperf", "-s", *fast_args)
    result.assert_outcomes(passed=1)
    text = result.stdout.str() + result.stderr.str()
    assert "USDT" not in text and "prototype feature" not in text


def _verdict(**fields: object) -> dict:
    base = {"label": "time", "unit": "s", "better": "lower", "kind": "time", "status": "regression"}
    return {**base, **fields}


def test_limits_are_printed_in_the_direction_of_the_change() -> None:
    assert format_limit("lower", 0.05) == "+5.0%"
    assert format_limit("higher", 0.5) == "-33.3%"
    assert format_limit("equal", 0.1) == "±10.0%"
    slower = _verdict(label="throughput", unit="items/s", better="higher", baseline=1000.0, value=601.0, ratio=0.601)
    assert short_fact({**slower, "tolerance": 0.5}).startswith(
        "throughput -39.9% < -33.3% (1.66x slower, tolerance 50%)"
    )
    ok = {**slower, "ratio": 0.7, "value": 700.0, "status": "unchanged", "tolerance": 0.5}
    assert verdict_word(ok) == "ok"  # -30.0% is inside -33.3%: nothing else decided it


def test_an_informational_metric_shows_its_change_but_no_limit() -> None:
    from pytest_gpuperf.reporting.markdown import SECTIONS
    from pytest_gpuperf.reporting.verdict_text import change_text, limit_text

    tripled = _verdict(label="time", unit="s", baseline=44.5e-6, value=145e-6, ratio=None, status="info")
    assert change_text(tripled) == "+225.8%" and limit_text(tripled) == ""  # seen, not judged
    assert change_text({**tripled, "baseline": None}) == ""
    assert [title for statuses, title in SECTIONS if "info" in statuses] == ["Informational (recorded, not judged)"]


def test_an_ab_failure_by_the_stored_baseline_says_to_record_and_one_by_the_comparison_says_review() -> None:
    from pytest_gpuperf.reporting.terminal import accept_hint

    title = "A/B against HEAD (abc)"
    stored = _verdict(extra={"ab": title}, message="params: same on both sides; against the stored baseline: changed")
    compared = _verdict(extra={"ab": title}, message="throughput: B is worse than A past the tolerance")
    by_stored, by_ab = accept_hint("t.py::x", [stored]), accept_hint("t.py::x", [compared])
    assert "--gpuperf-update" in by_stored and "review" not in by_stored
    assert "accept it in review" in by_ab and "--gpuperf-update" not in by_ab


def test_an_ab_table_names_its_columns_by_side() -> None:
    from pytest_gpuperf.reporting.terminal import AB_HEADER, HEADER, header_for

    ab = _verdict(extra={"ab": "A/B against HEAD (abc)"})
    assert header_for([ab]) == AB_HEADER and AB_HEADER[1:3] == ["A (ref)", "B (tree)"]
    assert header_for([ab, _verdict()]) == HEADER and header_for([]) == HEADER


def test_a_confidence_interval_that_decides_is_stated() -> None:
    held = _verdict(baseline=1.0, value=1.3, ratio=1.3, tolerance=0.05, status="unchanged", ci=[0.9, 1.6])
    assert verdict_word(held) == "ok (95% CI -10.0%..+60.0% includes no change)"


def test_failure_message_starts_with_every_failing_fact() -> None:
    verdicts = [
        _verdict(
            label="peak memory", unit="B", kind="memory", baseline=2**20, value=1338000, ratio=1.276, tolerance=0.05
        ),
        _verdict(
            label="bound",
            unit="",
            kind="category",
            baseline="compute-bound",
            value="latency-bound",
            ratio=None,
            status="changed",
        ),
        _verdict(status="unchanged", baseline=1.0, value=1.0, ratio=1.0, tolerance=0.05),
    ]
    text = failure_longrepr("t.py::t[x'; rm -rf ~; '-cpu]", verdicts, ["long message one", "long message two"])
    first, *rest = text.splitlines()
    assert first == "peak memory +27.6% > +5.0% (1.00 MiB -> 1.28 MiB); bound changed: compute-bound -> latency-bound"
    assert rest[:2] == ["  long message one", "  long message two"]
    assert "pytest --gpuperf --gpuperf-update 't.py::t[x'\"'\"'; rm -rf ~; '\"'\"'-cpu]'" in rest[2]


def test_summary_line_counts_statuses_and_names_devices() -> None:
    reported = [
        ("a", {"fingerprint": {"device_name": "AMD EPYC"}}, [{"status": "unchanged"}, {"status": "info"}]),
        ("b", {"fingerprint": {"device_name": "AMD EPYC"}}, [{"status": "new"}, {"status": "improvement"}]),
    ]
    assert summary_line(reported) == (
        "gpuperf: 2 tests, 4 metrics: 1 ok, 1 improved, 1 no baseline, 1 informational (AMD EPYC)"
    )


def test_a_strict_mode_failure_says_its_first_sentence_once() -> None:
    inconclusive = _verdict(status="inconclusive", baseline=1.0, value=1.3, ratio=1.3, tolerance=0.05)
    failures = ["time 1.30 s > baseline 1.00 s (+30.0%): inconclusive, a reason (--gpuperf-strict)"]
    text = failure_longrepr("t.py::t[cpu]", [inconclusive], failures)
    assert text.splitlines() == failures  # the head line only: no repeat, no "record it" advice for a non-change
    new = _verdict(status="new", baseline=None, value=1.0, ratio=None, tolerance=0.05)
    lines = failure_longrepr("t.py::t[cpu]", [new], ["time: no baseline on cpu (--gpuperf-strict)"]).splitlines()
    assert lines[0] == "time: no baseline on cpu (--gpuperf-strict)" and len(lines) == 2
    assert lines[1] == (
        "If this change is intended, record it with: pytest --gpuperf --gpuperf-update 't.py::t[cpu]' "
        "and commit the baselines/ diff."
    )
