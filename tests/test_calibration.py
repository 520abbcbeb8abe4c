"""The host CPU's calibration: stored with each timing entry, another machine makes time verdicts inconclusive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_gpuperf.baselines.policy import decide
from pytest_gpuperf.baselines.update import entries_for
from pytest_gpuperf.context import build_context
from pytest_gpuperf.judging.machine_rule import band, machine_change, missing_note
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.results import KIND_MEMORY, Metric
from pytest_gpuperf.timing import calibration
from pytest_gpuperf.timing.calibration import Calibration, summarize
from tests.test_judging import NODE, settings
from tests.test_verdicts import entry, samples, time_metric

US = 1e-6


class HostCpu:
    """A device-free host-CPU backend (CPU time tolerances, calibration applies)."""

    name = "cpu"

    def fingerprint(self) -> dict[str, Any]:
        return {"backend": "cpu", "device_name": "Fake CPU", "arch": "x86_64", "memory_gib": 1}

    def is_host_cpu(self) -> bool:
        return True


@pytest.fixture
def process_calibration() -> Iterator[None]:
    """Restore this process's calibration after a test that injects one."""
    before = calibration.measured()
    yield
    calibration.set_process_calibration(before)
    calibration.set_enabled(True)


def calibrated(value: float, spread: float = 0.02) -> dict[str, float]:
    return {"calibration": value, "calibration_spread": spread}


def judge(tmp_path: Path, metrics: list[Metric], entries: dict[str, Any]) -> tuple[list[Any], Judging]:
    judging = Judging(settings(tmp_path, time_tolerance=0.25), FixedBaselines(entries))
    context = build_context(NODE, HostCpu(), {})  # type: ignore[arg-type]
    verdicts = judging.judge(context, metrics)
    judging.store(context, verdicts)
    return verdicts, judging


def test_the_calibration_is_a_low_quantile_and_its_spread_reaches_the_quarter_quantile() -> None:
    thread = [26.0 * US] * 8 + [27.0 * US] * 20 + [42.0 * US] * 20  # a VM that switched speed states
    cal = summarize(thread, [2 * t for t in thread])
    assert cal.thread == pytest.approx(26.0 * US) and cal.wall == pytest.approx(52.0 * US)
    assert cal.thread_spread == pytest.approx(27.0 / 26.0 - 1.0)  # the slow half does not widen it
    assert cal.facts("thread_cpu") == {
        "calibration": 2.6e-05,
        "calibration_spread": 0.038,
        "calibration_other": 5.2e-05,
    }
    assert cal.facts("events")["calibration"] == 5.2e-05  # a wall-clock method carries the wall calibration


def test_the_same_machine_is_within_the_band_another_one_is_not() -> None:
    base = calibrated(26.0 * US)
    assert machine_change(calibrated(27.5 * US), base) is None  # +6%: band 10% + 2% + 2%
    assert band(0.02, 0.02) == pytest.approx(0.14)
    assert band(0.9, 0.0) == pytest.approx(0.25)  # a spread widens the band by 15% at most
    slower = machine_change(calibrated(52.0 * US), base)
    assert slower is not None and "2.00x slower than on the machine that recorded" in slower
    assert "--gpuperf-ab REF" in slower and "re-record here with --gpuperf-update" in slower
    faster = machine_change(calibrated(13.0 * US), base)
    assert faster is not None and "2.00x faster" in faster
    assert machine_change({}, base) is None and machine_change(calibrated(52.0 * US), {"value": 1.0}) is None


def test_another_machine_makes_time_inconclusive_while_memory_still_judges(tmp_path: Path) -> None:
    base = entry(samples(1.0, 2), **calibrated(26.0 * US))
    memory = {"value": 1000.0, "unit": "B", "better": "lower", "kind": "memory"}
    metrics = [
        time_metric(samples(2.0, 1), **calibrated(52.0 * US)),  # 2x slower machine, 2x slower step
        Metric("step.peak_memory", 2_000_000.0, "B", "lower", KIND_MEMORY),
    ]
    timing, grown = judge(tmp_path, metrics, {"step.time": base, "step.peak_memory": memory})[0]
    assert timing.status == "inconclusive" and timing.doubt == "machine" and not timing.failed
    assert timing.suspected == "regression" and "2.00x slower" in timing.message
    assert grown.status == "regression"  # memory is judged whatever the machine's speed


def test_a_real_slowdown_on_the_machine_that_recorded_still_fails(tmp_path: Path) -> None:
    base = entry(samples(1.0, 2), **calibrated(26.0 * US))
    [verdict], judging = judge(tmp_path, [time_metric(samples(1.5, 1), **calibrated(26.5 * US))], {"step.time": base})
    assert verdict.status == "regression" and judging.failure_lines(NODE)


def test_a_baseline_without_calibration_judges_as_before_and_a_failure_says_to_re_record(tmp_path: Path) -> None:
    old = entry(samples(1.0, 2))  # recorded by an older version
    [verdict], _ = judge(tmp_path, [time_metric(samples(1.5, 1), **calibrated(52.0 * US))], {"step.time": old})
    assert verdict.status == "regression"
    assert "stores no machine calibration" in verdict.message and "re-record with --gpuperf-update" in verdict.message
    [same], _ = judge(tmp_path, [time_metric(samples(1.0, 1), **calibrated(52.0 * US))], {"step.time": old})
    assert same.status == "unchanged"
    assert missing_note({}, old) is None  # a GPU timing carries no calibration: nothing to suggest


def test_an_entry_without_calibration_is_rewritten_once_one_with_it_is_kept(tmp_path: Path) -> None:
    metric = time_metric(samples(1.0, 1), method="thread_cpu", **calibrated(26.0 * US))
    metric.tolerance = 0.25
    new = entries_for([metric])
    assert new["step.time"]["calibration"] == 26.0 * US and new["step.time"]["calibration_spread"] == 0.02
    old = {"step.time": {k: v for k, v in new["step.time"].items() if not k.startswith("calibration")}}
    assert decide([metric], old, new, "here") == {}  # rewritten: the calibration is added
    kept = {"step.time": {**new["step.time"], "calibration": 27.0 * US}}
    assert "step.time" in decide([metric], kept, new, "here")  # within tolerance: kept byte for byte


def test_a_confirmation_that_agrees_from_another_machine_state_is_inconclusive(tmp_path: Path) -> None:
    base = entry(samples(1.0, 2), **calibrated(26.0 * US))
    [first], judging = judge(tmp_path, [time_metric(samples(1.5, 1), **calibrated(26.0 * US))], {"step.time": base})
    assert first.status == "regression"
    context = judging.contexts[NODE]
    slow_state = {"step.time": time_metric(samples(1.5, 3), **calibrated(40.0 * US))}
    [doubted] = judging.confirm(context, [first], slow_state)
    assert doubted.status == "inconclusive" and doubted.doubt == "machine"
    assert "a fresh process agreed, but there this machine's calibration" in doubted.message
    [confirmed] = judging.confirm(
        context, [first], {"step.time": time_metric(samples(1.5, 3), **calibrated(26.0 * US))}
    )
    assert confirmed.status == "regression"


def test_a_slowdown_read_in_another_speed_state_of_this_host_is_confirmed_in_a_fresh_process(tmp_path: Path) -> None:
    # bench_machine_calibration on the recording VM: 1.5x the work read +56..+62%, one run's calibration 1.14x off
    # (past the 14% band): that run was inconclusive. A fresh process of the same host may read the recording's
    # speed state, so the doubt is one a confirmation can clear; a 2x machine's stays "machine" (test above).
    base = entry(samples(1.0, 2), **calibrated(26.0 * US))
    [first], judging = judge(tmp_path, [time_metric(samples(1.5, 1), **calibrated(30.5 * US))], {"step.time": base})
    assert first.status == "inconclusive" and first.doubt == "state" and first.suspected == "regression"
    assert judging.wants_confirmation([first])
    context = judging.contexts[NODE]
    [confirmed] = judging.confirm(
        context, [first], {"step.time": time_metric(samples(1.5, 3), **calibrated(26.3 * US))}
    )
    assert confirmed.status == "regression" and "after a doubtful first run" in confirmed.message
    [still] = judging.confirm(context, [first], {"step.time": time_metric(samples(1.5, 3), **calibrated(30.6 * US))})
    assert still.status == "inconclusive" and not still.failed  # the fresh process was in that state too
    [cleared] = judging.confirm(context, [first], {"step.time": time_metric(samples(1.0, 3), **calibrated(26.3 * US))})
    assert cleared.status == "inconclusive" and not cleared.failed  # unchanged there: the first was the state's


def test_the_process_calibration_is_measured_once_and_can_be_switched_off(process_calibration: None) -> None:
    calibration.set_process_calibration(None)
    first = calibration.process_calibration()
    assert first is not None and first.thread > 0 and first.wall > 0 and first.cost > 0
    assert calibration.process_calibration() is first
    calibration.set_enabled(False)
    assert calibration.process_calibration() is None


def test_a_pinned_calibration_is_read_from_the_environment_and_a_bad_one_is_a_clear_error(
    process_calibration: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(calibration.PIN_ENV, "3.5e-05")
    calibration.set_process_calibration(None)
    pinned = calibration.process_calibration()
    assert pinned is not None and (pinned.thread, pinned.wall, pinned.wall_spread) == (3.5e-05, 3.5e-05, 0.01)
    assert calibration.host_calibration() == pinned  # a suspect's re-check reads the same value
    for bad in ("fast", "0", "-1e-5"):
        monkeypatch.setenv(calibration.PIN_ENV, bad)
        with pytest.raises(ValueError, match=rf"GPUPERF_PIN_CALIBRATION={bad!r}: expected"):
            calibration.host_calibration()


def test_a_measured_calibration_times_the_kernel_on_one_thread() -> None:
    import torch

    threads = torch.get_num_threads()
    cal = calibration.measure_calibration(repeats=4, calls=2, size=32)
    assert isinstance(cal, Calibration) and cal.thread > 0 and cal.thread_spread >= 0
    assert torch.get_num_threads() == threads  # restored


E2E_TEST = """
import os
import torch

def test_matmul(gpuperf):
    n = 96
    a, b = torch.randn(n, n), torch.randn(n, n)
    extra = int(os.environ.get("EXTRA", "0"))  # more work in the step, the declared work unchanged

    def step():
        for _ in range(1 + extra):
            torch.mm(a, b)

    gpuperf.measure(step, flops=2 * n**3, bytes_moved=3 * n * n * 4)
"""

INJECT = """
import os

from pytest_gpuperf.timing import calibration

MEASURE = calibration.measure_calibration


CALLS = []


def injected(*args, **kwargs):
    CALLS.append(1)
    later = os.environ.get("CALIBRATION_LATER") if len(CALLS) > 1 else None  # the VM's state moved mid-session
    value = float(later or os.environ["CALIBRATION"])
    return calibration.Calibration(value, 0.01, value, 0.01, 0.0)


def pytest_configure(config):
    calibration.measure_calibration = injected  # also what a suspect's re-check measures
    calibration.set_process_calibration(injected())


def pytest_unconfigure(config):
    calibration.measure_calibration = MEASURE
"""


@pytest.mark.real_calibration  # INJECT replaces what is measured: no pinned value
def test_end_to_end_another_machine_is_inconclusive_and_a_slowdown_here_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, process_calibration: None
) -> None:
    pytester.makepyfile(test_cal=E2E_TEST)
    pytester.makeconftest(INJECT)
    args = ["--gpuperf", "-p", "no:randomly", "-o", "gpuperf_max_time=0.3", "-o", "gpuperf_processes=1"]
    monkeypatch.setenv("CALIBRATION", "2.6e-05")
    pytester.runpytest(*args, "--gpuperf-update").assert_outcomes(passed=1)
    text = next((pytester.path / "baselines").glob("cpu-*.yaml")).read_text()
    assert "calibration: 2.6e-05" in text and "calibration_spread: 0.01" in text
    monkeypatch.setenv("EXTRA", "19")  # 20x the work per step: far beyond any noise
    monkeypatch.setenv("CALIBRATION", "5.2e-05")  # judged on a machine whose calibration is 2x slower
    other = pytester.runpytest(*args, "-W", "default")
    other.assert_outcomes(passed=1)
    other.stdout.fnmatch_lines(["*inconclusive (this machine's calibration*2.00x slower*"])
    monkeypatch.setenv("CALIBRATION", "2.65e-05")  # the machine that recorded
    here = pytester.runpytest(*args, "-o", "gpuperf_no_confirm=true")
    here.assert_outcomes(failed=1)
    here.stdout.fnmatch_lines(["*FAILED*time +*"])
    monkeypatch.setenv("CALIBRATION_LATER", "5.2e-05")  # the suspect's re-check finds a 2x slower state
    moved = pytester.runpytest(*args, "-o", "gpuperf_no_confirm=true")
    moved.assert_outcomes(passed=1)
    moved.stdout.fnmatch_lines(["*inconclusive (this machine's calibration*"])


def test_the_band_never_exceeds_the_metrics_tolerance() -> None:
    # A machine judged (within the band) whose steps followed its speed stays within the tolerance: never failed.
    assert band(0.15, 0.15, tolerance=0.25) == pytest.approx(0.25)
    assert band(0.02, 0.02, tolerance=0.25) == pytest.approx(0.14)
    base = calibrated(26.0 * US) | {"calibration_spread": 0.15}
    run = calibrated(26.0 * US * 1.3) | {"calibration_spread": 0.15}  # 1.3x: inside 10% + 15% + 15%, past 25%
    assert machine_change(run, base) is None and machine_change(run, base, tolerance=0.25) is not None


def test_a_recording_stores_how_far_the_calibration_moved_between_its_processes() -> None:
    from pytest_gpuperf.judging.replication import combine

    def process(value: float, cal_us: float) -> Metric:
        return time_metric([value] * 5, calibration=cal_us * US, calibration_spread=0.02)

    main = process(1.0, 44.0)
    combined = combine(main, [process(1.01, 50.6), process(0.99, 45.0)], 0.25)
    assert combined.extra["calibration_spread"] == pytest.approx(50.6 / 44.0 - 1.0, abs=1e-3)  # 15%, not 2%
    steady = combine(main, [process(1.01, 44.2), process(0.99, 44.1)], 0.25)
    assert steady.extra["calibration_spread"] == 0.02  # the processes agreed: the chosen one's own spread


def _process(value: float, cal_us: float) -> dict[str, Metric]:
    metric = time_metric([value] * 5, calibration=cal_us * US, calibration_spread=0.01)
    metric.tolerance = 0.25
    return {"step.time": metric}


def test_a_recording_replaces_a_process_that_ran_in_another_speed_state_of_the_host() -> None:
    from pytest_gpuperf.judging.replication import same_state

    asked: list[int] = []

    def fresh(n: int) -> tuple[list[dict[str, Metric]], str]:
        asked.append(n)
        return [_process(1.0, 44.5) for _ in range(n)], ""

    main = list(_process(1.0, 44.0).values())
    slow_state = [_process(1.0, 44.2), _process(1.6, 70.0)]  # one replica in the VM's 1.6x slower state
    runs, main_off, replaced = same_state(main, slow_state, fresh)
    assert (asked, main_off, replaced) == ([1], False, 1)
    assert sorted(r["step.time"].extra["calibration"] for r in runs) == [44.2 * US, 44.5 * US]
    asked.clear()  # this process itself was the odd one: left out, one more fresh process in its place
    runs, main_off, replaced = same_state(
        list(_process(1.6, 70.0).values()), [_process(1.0, 44.2), _process(1.0, 44.4)], fresh
    )
    assert (asked, main_off, replaced, len(runs)) == ([1], True, 1, 3)


def test_a_recording_keeps_its_processes_when_they_agree_or_the_replacements_run_out() -> None:
    from pytest_gpuperf.judging.replication import same_state

    def slow(n: int) -> tuple[list[dict[str, Metric]], str]:
        return [_process(1.6, 70.0) for _ in range(n)], ""  # every new process lands in the other state too

    main = list(_process(1.0, 44.0).values())
    agreeing = [_process(1.0, 44.3), _process(1.0, 45.0)]
    assert same_state(main, agreeing, slow) == (agreeing, False, 0)
    runs, _off, replaced = same_state(main, [_process(1.0, 44.2), _process(1.6, 70.0)], slow)
    assert replaced <= 2 and len(runs) == 2  # at most MAX_REPLACED, then the spread records both states
    assert same_state([], agreeing, slow) == (agreeing, False, 0)  # no calibration (a GPU): nothing to compare


def test_a_thread_the_test_leaves_spinning_cannot_excuse_its_slowdown(
    process_calibration: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 N3: the in-test recalibration is ignored when the test's own threads competed with it, and a
    recalibration is never kept for the session's later tests."""
    import threading
    import time

    from pytest_gpuperf.measuring import pipeline

    start_up = summarize([26.0 * US] * 30, [26.0 * US] * 30)
    calibration.set_process_calibration(start_up)
    slow = summarize([60.0 * US] * 30, [60.0 * US] * 30)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    def busy_calibration() -> Calibration:  # the kernel runs (real CPU work) while the leaked thread spins
        deadline = time.thread_time() + 0.3
        while time.thread_time() < deadline:
            sum(range(1000))
        return slow

    monkeypatch.setattr(calibration, "host_calibration", busy_calibration)
    extra = {"method": "thread_cpu", **start_up.facts("thread_cpu")}
    metric = Metric("step.time", 1e-3, "s", "lower", "time", extra=extra)
    plan = SimpleNamespace(recalibrated=lambda fresh: ("recalibrated", fresh))
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        same, changed = pipeline.recalibrated(plan, [metric])  # type: ignore[arg-type]
    finally:
        stop.set()
        spinner.join()
    assert (same, changed) == (plan, False)
    assert metric.extra["calibration"] == start_up.facts("thread_cpu")["calibration"]
    quiet, changed = pipeline.recalibrated(plan, [metric])  # type: ignore[arg-type]
    assert changed and quiet == ("recalibrated", slow)  # alone, a slower machine state is taken for this test
    assert calibration.measured() is start_up  # and never kept for the session
