"""Three outcomes from injected samples: regression caught, unchanged passes, noisy evidence inconclusive."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_gpuperf.baselines.recording import Recorder
from pytest_gpuperf.context import build_context
from pytest_gpuperf.fixture import GpuPerf
from pytest_gpuperf.judging.replication import combine, noise_facts, tolerance_warning
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.results import KIND_CATEGORY, KIND_CUSTOM, KIND_TIME, Metric
from pytest_gpuperf.stats import STAT_QUANTILE, min_detectable_change, noise_bound, quantile
from tests.test_judging import NODE, FakeBackend, settings


def samples(center: float, seed: int, spread: float = 0.005, n: int = 30) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in center * (1.0 + spread * np.abs(rng.standard_normal(n)))]


def time_metric(values: list[float], **extra: Any) -> Metric:
    return Metric("step.time", quantile(values, STAT_QUANTILE), "s", "lower", KIND_TIME, values, extra=dict(extra))


def entry(values: list[float], **facts: Any) -> dict[str, Any]:
    value = quantile(values, STAT_QUANTILE)
    return {"value": value, "unit": "s", "better": "lower", "kind": "time", "samples": values, **facts}


def judge_one(tmp_path: Path, metric: Metric, base: dict[str, Any], **overrides: Any) -> Any:
    judging = Judging(settings(tmp_path, **overrides), FixedBaselines({"step.time": base}))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    [verdict] = judging.judge(context, [metric])
    judging.store(context, [verdict])
    return verdict, judging


def test_a_regression_far_beyond_noise_fails(tmp_path: Path) -> None:
    verdict, judging = judge_one(tmp_path, time_metric(samples(1.2, 1)), entry(samples(1.0, 2)))
    assert verdict.status == "regression" and judging.failure_lines(NODE)
    assert verdict.ratio == pytest.approx(verdict.metric.value / verdict.baseline)  # the change shown is judged


def test_unchanged_code_passes(tmp_path: Path) -> None:
    verdict, judging = judge_one(tmp_path, time_metric(samples(1.0, 3)), entry(samples(1.0, 4)))
    assert verdict.status == "unchanged" and not judging.failure_lines(NODE) and not judging.warnings_for(NODE)


def test_a_change_within_the_spread_between_processes_is_inconclusive_and_says_what_to_do(tmp_path: Path) -> None:
    base = entry(samples(1.0, 5), process_spread=0.18, processes=3)
    verdict, judging = judge_one(tmp_path, time_metric(samples(1.10, 6)), base)
    assert verdict.status == "inconclusive" and not verdict.failed
    assert "this test's spread between processes is 18% here; a 5% tolerance cannot be judged on this machine" in (
        verdict.message
    )
    assert "raise time_tolerance to 20% (@pytest.mark.gpuperf(time_tolerance=0.2))" in verdict.message
    assert (
        "re-record on a quieter runner with: pytest --gpuperf --gpuperf-update -o gpuperf_processes=5 "
        "'test_x.py::test_step[fake]' (from 5 processes it replaces an entry that cannot decide)"
    ) in verdict.message
    assert verdict.reason and verdict.message.endswith(verdict.reason)
    assert not judging.failure_lines(NODE)
    [warning] = judging.warnings_for(NODE)
    assert "inconclusive" in warning and "--gpuperf-strict" in warning
    far = judge_one(tmp_path, time_metric(samples(1.6, 7)), base)[0]  # +60% is past spread + tolerance
    assert far.status == "regression"
    for center in (1.0, 0.85):  # "unchanged" or "improved" inside that band is no evidence either
        assert judge_one(tmp_path, time_metric(samples(center, 8)), base)[0].status == "inconclusive"
    calm = entry(samples(1.0, 5), process_spread=0.03, processes=3)  # processes agree: the gate decides
    assert judge_one(tmp_path, time_metric(samples(1.0, 8)), calm)[0].status == "unchanged"


def test_strict_fails_an_inconclusive_verdict(tmp_path: Path) -> None:
    base = entry(samples(1.0, 5), process_spread=0.18)
    verdict, judging = judge_one(tmp_path, time_metric(samples(1.10, 6)), base, strict=True)
    assert verdict.status == "inconclusive"
    [line] = judging.failure_lines(NODE)
    assert line.endswith("(--gpuperf-strict)") and not judging.warnings_for(NODE)


@pytest.mark.parametrize(
    ("extra", "base_facts", "words"),
    [
        ({"contended": True, "contended_fraction": 0.6, "cpu_pressure_avg10": 55.0}, {}, "waited for a CPU"),
        ({"settled": False, "warmup_calls": 400, "warmup_seconds": 1.5}, {}, "never settled"),
        ({"sm_clock_mhz": 1410}, {"sm_clock_mhz": 1980}, "1410 MHz here but 1980 MHz"),
        ({"throttled": True, "clock_events": "hw_thermal_slowdown"}, {}, "throttled"),
    ],
)
def test_a_changed_machine_or_a_contended_run_is_inconclusive(
    tmp_path: Path, extra: dict[str, Any], base_facts: dict[str, Any], words: str
) -> None:
    verdict, _ = judge_one(tmp_path, time_metric(samples(1.3, 8), **extra), entry(samples(1.0, 9), **base_facts))
    assert verdict.status == "inconclusive" and words in verdict.message


def test_contention_spoils_neither_an_unchanged_verdict_nor_a_slowdown_far_beyond_it(tmp_path: Path) -> None:
    metric = time_metric(samples(1.0, 10), contended=True, contended_fraction=0.9)
    assert judge_one(tmp_path, metric, entry(samples(1.0, 11)))[0].status == "unchanged"
    metric = time_metric(samples(20.0, 10), contended=True, contended_fraction=0.9)
    assert judge_one(tmp_path, metric, entry(samples(1.0, 11)))[0].status == "regression"


def test_a_run_doubted_for_its_conditions_is_confirmed_by_a_clean_fresh_process(tmp_path: Path) -> None:
    first, judging = judge_one(tmp_path, time_metric(samples(1.5, 16), settled=False), entry(samples(1.0, 17)))
    assert first.status == "inconclusive" and first.suspected == "regression" and first.doubt == "conditions"
    judging.confirm_stored(NODE, {"step.time": time_metric(samples(1.5, 18))})
    [confirmed] = judging.verdicts[NODE]
    assert confirmed.status == "regression" and "after a doubtful first run" in confirmed.message
    assert judging.failure_lines(NODE)


def test_a_confirmation_that_disagrees_is_inconclusive_one_that_agrees_fails(tmp_path: Path) -> None:
    base = entry(samples(1.0, 12))
    first, judging = judge_one(tmp_path, time_metric(samples(1.3, 13)), base)
    assert first.status == "regression"
    context = judging.contexts[NODE]
    [agreed] = judging.confirm(context, [first], {"step.time": time_metric(samples(1.28, 14))})
    assert agreed.status == "regression" and "confirmed in a fresh process (+2" in agreed.message
    [disagreed] = judging.confirm(context, [first], {"step.time": time_metric(samples(1.0, 15))})
    assert disagreed.status == "inconclusive" and "its confirmation in a fresh process measured" in disagreed.message
    [missing] = judging.confirm(context, [first], None, "ReplicaError: a class method")
    assert missing.status == "regression" and "not confirmed in a fresh process (ReplicaError" in missing.message


def test_a_bound_change_with_the_same_flops_per_byte_is_inconclusive_a_new_intensity_fails(tmp_path: Path) -> None:
    entries = {
        "step.bound": {"value": "compute-bound", "kind": "category"},
        "step.arithmetic_intensity": {"value": 4.99, "kind": "custom"},
    }
    judging = Judging(settings(tmp_path), FixedBaselines(entries))
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]

    def bound(intensity: float) -> Any:
        metrics = [
            Metric("step.bound", "latency-bound", "", "equal", KIND_CATEGORY),
            Metric("step.arithmetic_intensity", intensity, "FLOP/B", "equal", KIND_CUSTOM, judged=False),
        ]
        return judging.judge(context, metrics)[0]

    slower = bound(4.99)
    assert slower.status == "inconclusive" and "only its speed moved" in slower.message
    assert bound(0.81).status == "changed"


def test_minimum_detectable_change_math() -> None:
    assert min_detectable_change(0.0, 0.05) == pytest.approx(0.05)  # no noise: the tolerance itself
    sigma = 0.02
    expected = 1.05 * math.exp(1.645 * sigma * math.sqrt(2.0)) - 1.0
    assert min_detectable_change(sigma, 0.05, processes=1) == pytest.approx(expected)
    assert min_detectable_change(sigma, 0.05, processes=3) < expected  # a median over more processes helps
    assert noise_bound(0.0) == 0.0
    facts = noise_facts([4.85e-3, 5.36e-3, 19.3e-3, 5.22e-3], 0.01, 0.25)  # the four CPU processes of issue 14
    assert facts["processes"] == 4 and facts["process_spread"] == pytest.approx(19.3 / 4.85 - 1, abs=1e-3)
    assert facts["min_detectable_change"] > 1.0 and facts["noise_bound"] > 0.25


def test_a_baseline_from_several_processes_keeps_the_median_process_and_warns_about_a_tight_tolerance() -> None:
    runs = [time_metric(samples(c, i), precision=0.01) for i, c in enumerate((1.0, 1.3, 1.05))]
    for run in runs:
        run.tolerance = 0.05
    combined = combine(runs[0], runs[1:], 0.05)
    assert combined.value == pytest.approx(runs[2].value)  # the median of 1.0, 1.05, 1.3
    assert combined.extra["processes"] == 3
    assert combined.extra["process_spread"] == pytest.approx(runs[1].value / runs[0].value - 1, abs=1e-3)
    warning = tolerance_warning(combined, "t.py::t[cpu]")
    assert warning is not None and "recorded from 3 processes whose results spread 30%, wider than its 5%" in warning
    assert "later runs of this test are inconclusive" in warning
    assert "(@pytest.mark.gpuperf(time_tolerance=0.3" in warning
    assert (
        "pytest --gpuperf --gpuperf-update -o gpuperf_processes=5 't.py::t[cpu]' "
        "(from 5 processes it replaces an entry that cannot decide)"
    ) in warning
    combined.extra["baseline_kept"] = True  # the file keeps its stored entry: nothing new to warn about
    assert tolerance_warning(combined) is None


def test_update_merges_fresh_processes_into_the_entry_it_writes(tmp_path: Path) -> None:
    recorder = Recorder(processes=3)
    judging = Judging(settings(tmp_path, update=True), FixedBaselines({}, path=str(tmp_path / "f.yaml")), recorder)
    context = build_context(NODE, FakeBackend(), {})  # type: ignore[arg-type]
    judging.store(context, judging.judge(context, [time_metric(samples(1.0, 20), precision=0.01)]))
    runs = [{"step.time": time_metric(samples(1.5, 21))}, {"step.time": time_metric(samples(1.1, 22))}]
    assert judging.second_look(NODE, lambda n: (runs[:n], "")) is None
    [(_, (_, tests))] = recorder.pending().items()
    stored = tests[NODE]["step.time"]
    assert stored["processes"] == 3 and stored["process_spread"] == pytest.approx(0.5, abs=0.02)
    assert stored["value"] == pytest.approx(quantile(samples(1.1, 22), STAT_QUANTILE))


def test_measure_refuses_a_repeated_name_and_non_positive_work() -> None:
    class Cpu(FakeBackend):
        def synchronize(self) -> None: ...

    handle = GpuPerf(build_context(NODE, Cpu(), {}))  # type: ignore[arg-type]
    handle.measure(lambda: None, name="fwd")
    with pytest.raises(ValueError, match="already called in this test"):
        handle.measure(lambda: None, name="fwd")
    for bad in ({"items": 0}, {"items": float("nan")}, {"flops": -1.0}, {"bytes_moved": True}):
        with pytest.raises(ValueError, match="expected a finite number > 0"):
            handle.measure(lambda: None, name="other", **bad)


def test_the_verdict_column_shows_the_deciding_rules_reason_never_a_ci_that_excludes_no_change(tmp_path: Path) -> None:
    """Issue 23: 'inconclusive (95% CI -36.6%..-29.5% includes no change)' when a disagreeing confirmation decided."""
    from pytest_gpuperf.reporting.verdict_text import verdict_word
    from pytest_gpuperf.results import verdict_to_dict

    first, judging = judge_one(tmp_path, time_metric(samples(1.5, 16), settled=False), entry(samples(1.0, 17)))
    assert first.doubt == "conditions" and first.ci is not None and first.ci[0] > 1.0  # the CI excludes no change
    judging.confirm_stored(NODE, {"step.time": time_metric(samples(1.0, 18))})
    [disagreed] = judging.verdicts[NODE]
    assert disagreed.status == "inconclusive" and disagreed.doubt == "confirmation"
    assert disagreed.message.count("inconclusive") == 1  # both reasons, said once
    assert "the first run was doubtful too (the step never settled during warm-up" in disagreed.message
    word = verdict_word(verdict_to_dict(disagreed))
    assert word.startswith("inconclusive (its confirmation in a fresh process measured ") and "CI" not in word
    assert "pytest --gpuperf --gpuperf-update -o gpuperf_processes=5 'test_x.py::test_step[fake]'" in disagreed.reason


def test_a_verdict_comes_back_from_its_dict_as_it_was_written() -> None:
    """The pair that carries a worker's verdicts to its controller (A/B): one conversion each way."""
    import json

    from pytest_gpuperf.results import Verdict, verdict_from_dict, verdict_to_dict

    metric = time_metric([1.0, 1.1, 1.2], sm_clock_mhz=1500.0)
    metric.tolerance = 0.05  # the metric's tolerance travels as the verdict's
    written = Verdict(metric, "inconclusive", 1.0, 1.05, (0.98, 1.12), 0.05, "m", doubt="spread", reason="why")
    back = verdict_from_dict(json.loads(json.dumps(verdict_to_dict(written))))
    assert back == Verdict(metric, "inconclusive", 1.0, 1.05, (0.98, 1.12), 0.05, "m", doubt="spread", reason="why")
    assert verdict_to_dict(back) == verdict_to_dict(written)
    assert not verdict_from_dict(verdict_to_dict(Verdict(metric, "info"))).metric.judged
