"""What the workers of both sides returned (per run, per test), and the A/B verdicts judged from it pair by pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.ab.clocks import decide_by_clocks, pairs_of
from pytest_gpuperf.ab.judge import AbVerdict, SideSample, judge_metric, one_sided


@dataclass
class WorkerRun:
    """One worker process: its side, wall time and what it wrote (or why nothing came back)."""

    side: str
    pair: int
    seconds: float
    tests: int
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: Seconds from the A/B run's start to the worker's start, ready, go and done (:meth:`WarmWorker.timeline`).
    timeline: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """What the reports show of this worker: side, pair, seconds from "go" to its results, each test's call
        seconds (where it spent them) and its timeline in the A/B run."""
        durations = {
            nodeid: round(float(entry["duration"]), 3)
            for nodeid, entry in (self.data.get("tests") or {}).items()
            if isinstance(entry, dict) and isinstance(entry.get("duration"), (int, float))
        }
        return {
            "side": self.side,
            "pair": self.pair,
            "seconds": round(self.seconds, 3),
            "tests": self.tests,
            "failed": self.error is not None,
            "call_s": durations,
            "timeline": dict(self.timeline),
        }


@dataclass
class TestEvidence:
    """Everything the workers returned for one test, by round pair."""

    __test__ = False

    nodeid: str
    a: list[dict[str, Any] | None] = field(default_factory=list)
    b: list[dict[str, Any] | None] = field(default_factory=list)
    verdicts: list[AbVerdict] = field(default_factory=list)

    def errors(self, side: str) -> list[str]:
        """Error texts of this test's processes on ``side``."""
        entries = self.a if side == "A" else self.b
        return [str(e["error"]) for e in entries if e and e.get("error")]

    def last_payload(self, side: str) -> dict[str, Any] | None:
        """The latest ``report.gpuperf`` payload of ``side``."""
        entries = self.a if side == "A" else self.b
        payloads = [e["payload"] for e in entries if e and e.get("payload")]
        return payloads[-1] if payloads else None

    @property
    def decided(self) -> bool:
        """True when no metric needs more rounds."""
        return all(v.decided for v in self.verdicts)


def _metrics(entry: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    payload = (entry or {}).get("payload") or {}
    return {str(v["metric"]): v for v in payload.get("verdicts", []) if "metric" in v}


def _sample(verdict: dict[str, Any]) -> SideSample:
    return SideSample(verdict.get("value"), list(verdict.get("sample_values") or []), str(verdict.get("status", "")))


def judge_evidence(evidence: TestEvidence, final: bool) -> list[AbVerdict]:
    """Judge every metric of one test from its pairs (pairs where both sides reported the metric)."""
    a_metrics = [_metrics(e) for e in evidence.a]
    b_metrics = [_metrics(e) for e in evidence.b]
    names: list[str] = []
    for metrics in [*b_metrics, *a_metrics]:
        names += [n for n in metrics if n not in names]
    verdicts = []
    for name in names:
        a_side = [_sample(m[name]) for m in a_metrics if name in m]
        b_side = [_sample(m[name]) for m in b_metrics if name in m]
        info = next((m[name] for m in reversed(b_metrics) if name in m), None) or next(
            m[name] for m in a_metrics if name in m
        )
        if not a_side or not b_side:
            verdicts.append(one_sided(name, info, a_side, b_side))
            continue
        verdicts.append(judge_metric(name, a_side, b_side, pairs_of(name, a_metrics, b_metrics), info, final))
    decide_by_clocks(verdicts, a_metrics, b_metrics, final)
    return verdicts


def collect_error(run: WorkerRun, nodeid: str) -> str | None:
    """The collection error of the file (or a folder above it) that holds ``nodeid`` on the run's side."""
    path = nodeid.split("::", 1)[0]
    for where, text in (run.data.get("collect_errors") or {}).items():
        if where and (path == where or path.startswith(where.rstrip("/") + "/")):
            return f"collecting {where} failed:\n{text}"
    return None


def broken_tests(run: WorkerRun, nodeids: list[str]) -> set[str]:
    """Tests whose file failed to import on the run's side: present there, but broken (not new)."""
    return {n for n in nodeids if collect_error(run, n) is not None}


def entry_of(run: WorkerRun, nodeid: str) -> dict[str, Any] | None:
    """What ``run`` returned for ``nodeid``: its entry, or an error entry when the worker or its file failed."""
    if run.error is not None:
        return {"outcome": "error", "error": run.error, "payload": None}
    found = run.data.get("tests", {}).get(nodeid)
    if found is None and collect_error(run, nodeid) is not None:
        return {"outcome": "error", "error": collect_error(run, nodeid), "payload": None}
    return found
