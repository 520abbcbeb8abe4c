"""Issue 35: a wall-clocked ``gpuperf_torchrun`` script whose ranks waited for a CPU is not failed for its neighbours.

The ranks' wait is read from the scheduler's counters while the script runs (``distributed/rank_wait.py``);
a slowdown that waiting explains is inconclusive, one far past it (3x) still fails. Verdicts use injected samples.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.context import build_context
from pytest_gpuperf.distributed.rank_wait import RankWait, read_schedstat, wait_facts
from pytest_gpuperf.judging.evidence import contention_limit
from pytest_gpuperf.judging.service import FixedBaselines, Judging
from pytest_gpuperf.results import KIND_THROUGHPUT, Metric
from tests.test_judging import NODE, FakeBackend, settings
from tests.test_verdicts import samples

CALIBRATION = {"calibration": 50e-6, "calibration_spread": 0.02, "method": "wall"}


def tokens_metric(rate: float, seed: int, **extra: object) -> Metric:
    """A script's slowest-rank tokens/s (wall-clocked, host CPU)."""
    values = samples(rate, seed)
    return Metric(
        "train.tokens_per_s", min(values), "tokens/s", "higher", KIND_THROUGHPUT, values, extra={**CALIBRATION, **extra}
    )


def tokens_entry(rate: float) -> dict[str, object]:
    values = samples(rate, 99)
    return {
        "value": min(values),
        "unit": "tokens/s",
        "better": "higher",
        "kind": "throughput",
        "samples": values,
        **CALIBRATION,
    }


@pytest.mark.parametrize(
    ("slower", "wait", "status"),
    [
        (1.97, 0.5, "inconclusive"),  # the README's busy-VM read: the ranks waited half their time
        (3.0 * 1.97, 0.5, "regression"),  # 3x the work under the same load: far past what waiting explains
        (3.0, None, "regression"),  # 3x on a quiet machine
        (1.97, 0.02, "regression"),  # the ranks hardly waited: the script itself is slower
    ],
)
def test_a_script_slowed_by_its_ranks_waiting_is_inconclusive_and_3x_still_fails(
    tmp_path: Path, slower: float, wait: float | None, status: str
) -> None:
    metric = tokens_metric(1000.0 / slower, 1, **wait_facts(wait))
    judging = Judging(settings(tmp_path, time_tolerance=0.25), FixedBaselines({metric.name: tokens_entry(1000.0)}))
    [verdict] = judging.judge(build_context(NODE, FakeBackend(), {}), [metric])  # type: ignore[arg-type]
    assert verdict.status == status, verdict.message
    if status == "inconclusive":
        assert "ranks waited for a CPU 50% of their time" in verdict.message and verdict.doubt == "conditions"


def test_the_limit_is_what_the_waiting_explains_on_top_of_the_tolerance() -> None:
    assert contention_limit({"rank_wait_share": 0.5}, 0.25) == pytest.approx(2.5)
    assert contention_limit({"rank_wait_share": 0.99}, 0.0) == pytest.approx(4.0)  # capped
    assert contention_limit({}, 0.25) == 2.0  # a sample's thread time: the contention guard's limit
    assert wait_facts(None) == {} and wait_facts(0.05)["contended"] is False and wait_facts(0.3)["contended"]


def test_schedstat_lines_are_read_and_bad_ones_refused(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("1500 500 7\n")
    bad.write_text("garbage\n")
    assert read_schedstat(good) == (1500, 500)
    assert read_schedstat(bad) is None and read_schedstat(tmp_path / "gone") is None


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_the_ranks_threads_are_polled_while_the_script_runs() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass"]
    )
    try:
        with RankWait(__import__("os").getpid(), interval=0.05) as waited:
            while child.poll() is None:
                time.sleep(0.05)
    finally:
        child.wait()
    assert any(pid == child.pid for pid, _ in waited.seen)
    share = waited.share()
    assert share is not None and 0.0 <= share < 1.0
