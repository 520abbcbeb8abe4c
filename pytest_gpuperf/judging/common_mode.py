"""The runner that moved: when most timed tests of one session ran slower by a similar ratio, the runner moved.

Each timed test of a session (one backend of one pytest process) gives one point: the median log of its timing
verdicts' slowdown (time ratio, or the inverse throughput ratio) and the log of its tolerance (its *band*). A
**common mode** exists when

* at least :data:`MIN_MOVED` tests moved slower beyond their own tolerance *together*: each lies within its own
  band of the centre, the median of their log ratios (a robust centre; taken twice, first over every test that
  moved, then over those the first centre explains, so a lone outlier never pulls it);
* and they are a strict majority of the session's timed tests (a regression of a few tests that share code does
  not look like a runner; a runner change moves nearly all of them).

The spread is the scaled median absolute deviation of the explained tests' log ratios (reported with the centre).
Then :func:`rejudge`:

* a timing regression within its tolerance of the common mode is *inconclusive* (doubt :data:`RUNNER`): the
  runner, not the code, explains it;
* a timing regression slower than the common mode by more than its tolerance stays a regression, and so does a
  verdict that only the machine rule made inconclusive (the host calibration or GPU clocks say the machine moved;
  the session's own tests say by how much): it is judged on its ratio over the common mode. A test is never failed
  unless it is also slower than its baseline beyond the tolerance, and never excused when it ran slower than the
  runner moved: the gate's promise to fail a real slowdown of a lone test holds.

A runner that got faster fails nothing and is left alone. Nothing is rescaled: every verdict keeps its measured
ratio; the common mode only decides whether that ratio is evidence against the code. The ratios of the tests, not
a calibration kernel, measure the move, so this works on every backend (a GPU has no host calibration) and sees a
slowdown the CPU calibration kernel does not (memory bandwidth, another GPU clock policy).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_gpuperf.results import KIND_THROUGHPUT, KIND_TIME, Verdict

#: The doubt of a timing verdict the session's common mode explains (:mod:`.evidence` names the others).
RUNNER = "runner"
#: Fewest timed tests that must move together before a session speaks of a runner change.
MIN_MOVED = 5
#: Scales a median absolute deviation to a standard deviation (for normally distributed log ratios).
MAD_SCALE = 1.4826
#: Machine-rule doubts: a verdict they made inconclusive is judged against the common mode, when there is one.
MACHINE_DOUBTS = ("machine", "state")
#: What a judged timing verdict's status may be for its test to count as timed.
TIMED_STATUSES = ("regression", "improvement", "unchanged", "inconclusive")


@dataclass(frozen=True)
class Point:
    """One timed test of a session: its slowdown and its tolerance, both as logs (``shift``: + is slower)."""

    node_id: str
    group: str
    shift: float
    band: float

    @property
    def slower(self) -> bool:
        """True when the test ran slower than its baseline by more than its tolerance."""
        return self.shift > self.band


@dataclass(frozen=True)
class CommonMode:
    """The move a session's timed tests share: its log ratio, spread, and which tests it explains."""

    group: str
    shift: float
    spread: float
    explained: tuple[str, ...]
    timed: int

    @property
    def ratio(self) -> float:
        """How many times slower the explained tests ran (the median)."""
        return math.exp(self.shift)

    def describe(self) -> str:
        """``9 of 10 timed cpu tests ran 1.50x slower together (spread 3%)``."""
        spread = f"spread {math.expm1(self.spread):.0%}"
        return (
            f"{len(self.explained)} of {self.timed} timed {self.group} tests ran {self.ratio:.2f}x slower together "
            f"(median; {spread})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (report payload, the JSON report's ``runner_changes``)."""
        return {
            "backend": self.group,
            "ratio": round(self.ratio, 4),
            "spread": round(math.expm1(self.spread), 4),
            "moved": len(self.explained),
            "timed": self.timed,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        }


def _timing(verdict: Verdict) -> bool:
    """A judged time/throughput verdict with a usable ratio."""
    metric, ratio = verdict.metric, verdict.ratio
    return (
        metric.kind in (KIND_TIME, KIND_THROUGHPUT)
        and metric.judged
        and verdict.status in TIMED_STATUSES
        and isinstance(ratio, (int, float))
        and ratio > 0
        and math.isfinite(ratio)
    )


def _shift(verdict: Verdict) -> float:
    """The log slowdown of a timing verdict (+ slower; a throughput's ratio is inverted)."""
    ratio = float(verdict.ratio)  # type: ignore[arg-type]
    return math.log(ratio) if verdict.metric.better == "lower" else -math.log(ratio)


def _band(verdict: Verdict) -> float:
    """The log of ``1 + tolerance``: how far a timing verdict may move and still be unchanged."""
    return math.log1p(max(0.0, float(verdict.tolerance or 0.0)))


def point(node_id: str, group: str, verdicts: Sequence[Verdict]) -> Point | None:
    """The test's point (medians over its timing verdicts), or None when it has no judged timing verdict."""
    timed = [v for v in verdicts if _timing(v)]
    if not timed:
        return None
    return Point(node_id, group, statistics.median(map(_shift, timed)), statistics.median(map(_band, timed)))


def _explained(points: Sequence[Point], centre: float) -> list[Point]:
    """The tests that moved slower and lie within their own band of ``centre``."""
    return [p for p in points if p.slower and abs(p.shift - centre) <= p.band]


def estimate(points: Sequence[Point]) -> CommonMode | None:
    """The common mode of one group's points (see the module's rules), or None."""
    moved = [p for p in points if p.slower]
    if len(moved) < MIN_MOVED or 2 * len(moved) <= len(points):
        return None
    centre = statistics.median(p.shift for p in moved)
    explained = _explained(points, centre)
    if explained:
        centre = statistics.median(p.shift for p in explained)
        explained = _explained(points, centre)
    if len(explained) < MIN_MOVED or 2 * len(explained) <= len(points):
        return None
    spread = MAD_SCALE * statistics.median(abs(p.shift - centre) for p in explained)
    return CommonMode(points[0].group, centre, spread, tuple(p.node_id for p in explained), len(points))


def possible(points: Sequence[Point], remaining: int) -> bool:
    """Whether ``remaining`` more timed tests could still make a common mode of ``points`` (all of them slower)."""
    moved = sum(p.slower for p in points) + remaining
    return moved >= MIN_MOVED and 2 * moved > len(points) + remaining


def candidate(verdicts: Sequence[Verdict]) -> bool:
    """True when a common mode could change a verdict of this test: a timing regression, or one suspected that
    only the machine rule made inconclusive."""
    return any(
        _timing(v) and (v.status == "regression" or (v.suspected == "regression" and v.doubt in MACHINE_DOUBTS))
        for v in verdicts
    )


def rejudge(verdicts: Sequence[Verdict], mode: CommonMode) -> list[Verdict]:
    """``verdicts`` judged against the session's common mode (see the module): only timing verdicts that moved
    slower beyond their tolerance change; memory, class, counts and every other verdict stay as they are."""
    out = []
    for verdict in verdicts:
        suspect = verdict.status == "regression" or (
            verdict.suspected == "regression" and verdict.doubt in MACHINE_DOUBTS
        )
        if not (_timing(verdict) and suspect and _shift(verdict) > _band(verdict)):
            out.append(verdict)
        elif _shift(verdict) - mode.shift <= _band(verdict):
            out.append(_excused(verdict, mode))
        else:
            out.append(_against(verdict, mode))
    return out


def _excused(verdict: Verdict, mode: CommonMode) -> Verdict:
    """A timing regression the common mode explains: inconclusive (a machine-rule verdict keeps its reason)."""
    if verdict.status == "inconclusive":
        return verdict
    from pytest_gpuperf.judging.evidence import inconclusive

    reason = (
        f"the runner changed: {mode.describe()}, and this test moved with them; its time is not judged against "
        "this baseline; compare on one runner with --gpuperf-ab REF, or re-record on this one with --gpuperf-update"
    )
    return inconclusive(verdict, reason, RUNNER)


def _against(verdict: Verdict, mode: CommonMode) -> Verdict:
    """A timing verdict slower than the common mode by more than its tolerance: a regression, saying so."""
    relative = math.exp(_shift(verdict) - mode.shift)
    verdict.metric.extra["runner_relative"] = round(relative, 4)  # the reports name the tests judged against it
    note = f"{relative:.2f}x slower than this session's common mode ({mode.describe()}): the runner does not explain it"
    if verdict.status == "regression":
        return replace(verdict, message=f"{verdict.message}; {note}")
    shown = (verdict.message or verdict.metric.label()).removesuffix(f": inconclusive, {verdict.reason}")
    return replace(verdict, status="regression", message=f"{shown}; {note}", suspected="", doubt="", reason="")
