"""Turn one test's A/B evidence into the session's verdicts (so every report shows them) and its A/B record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.ab.judge import AbVerdict
from pytest_gpuperf.ab.report import show_value
from pytest_gpuperf.hookspecs import VerdictsInstead
from pytest_gpuperf.results import Metric, Verdict, verdict_from_dict, worst_status
from pytest_gpuperf.units import format_change

if TYPE_CHECKING:
    from pytest_gpuperf.ab.evidence import TestEvidence
    from pytest_gpuperf.ab.gitref import Worktree
    from pytest_gpuperf.ab.runner import AbOutcome
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.extensions import PerfSession

JUDGED_KINDS = ("time", "throughput", "memory")


def _message(title: str, ab: AbVerdict) -> str:
    change = f", {format_change(ab.ratio)}" if ab.ratio else ""
    return f"{ab.label}: {title}: A {show_value(ab.a, ab.unit)}, B {show_value(ab.b, ab.unit)}{change}; {ab.message}"


def _best_samples(evidence: TestEvidence, name: str) -> list[float]:
    best: list[float] = []
    for entry in evidence.b:
        for verdict in ((entry or {}).get("payload") or {}).get("verdicts", []):
            if verdict.get("metric") == name and verdict.get("value") is not None:
                samples = list(verdict.get("sample_values") or [])
                if not best or (samples and min(samples) < min(best)):
                    best = samples
    return best


def to_verdict(title: str, ab: AbVerdict, samples: list[float]) -> Verdict:
    """A session verdict for one A/B metric: B's value as measured, A's as the baseline."""
    value = ab.b if ab.b is not None else ab.a
    metric = Metric(
        ab.metric,
        value if isinstance(value, (int, float, str)) else "-",
        ab.unit,
        ab.better if ab.better in ("lower", "higher", "equal") else "lower",  # type: ignore[arg-type]
        ab.kind,
        samples=samples,
        judged=ab.status != "info",
        tolerance=ab.tolerance,
        extra={"ab": title, "ab_a": ", ".join(show_value(v, ab.unit) for v in ab.a_values)},
    )
    status = "unchanged" if ab.status == "undecided" else ab.status
    baseline = ab.a if isinstance(ab.a, (int, float, str)) else None
    return Verdict(metric, status, baseline, ab.ratio, None, ab.tolerance, _message(title, ab))  # type: ignore[arg-type]


def _skip_reason(evidence: TestEvidence, side: str) -> str | None:
    entries = [e for e in (evidence.a if side == "A" else evidence.b) if e]
    skipped = [e for e in entries if e.get("outcome") == "skipped"]
    if entries and len(skipped) == len(entries):
        return str(skipped[0].get("skip") or "skipped")
    return None


def _context(item: pytest.Function, world_size: int) -> TestContext:
    """The test's frozen context (backend from the ``gpuperf_backend`` fixture, the B side's world size)."""
    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.context import build_context
    from pytest_gpuperf.keys import BACKEND_KEY, WORLD_SIZE_KEY

    backend = item.stash.get(BACKEND_KEY, None)
    if backend is None:
        backend = get_backend(str(item.callspec.params["gpuperf_backend"]))
    item.stash[WORLD_SIZE_KEY] = world_size
    marker = item.get_closest_marker("gpuperf")
    return build_context(item.nodeid, backend, dict(marker.kwargs) if marker else {}, world_size)


def _record_update(session: PerfSession, context: TestContext, evidence: TestEvidence) -> None:
    """Under ``--gpuperf-update``: record the metrics of the B process with the median judged time.

    Through the judging service's ``store`` (its updater validates and writes them when the test passes).
    """
    payloads = [e["payload"] for e in evidence.b if e and e.get("payload")]
    if not payloads:
        return

    def key(payload: dict[str, Any]) -> float:
        values = [v["value"] for v in payload.get("verdicts", []) if v.get("kind") == "time"]
        return float(values[0]) if values and isinstance(values[0], (int, float)) else 0.0

    chosen = sorted(payloads, key=key)[(len(payloads) - 1) // 2]
    metrics = [verdict_from_dict(v).metric for v in chosen.get("verdicts", [])]
    session.judging.store(context, [Verdict(m, "recorded", tolerance=m.tolerance) for m in metrics])


def apply_evidence(
    session: PerfSession, worktree: Worktree, item: pytest.Function, evidence: TestEvidence, outcome: AbOutcome
) -> tuple[dict[str, Any], VerdictsInstead]:
    """The A/B record of ``item`` and the verdicts it reports in place of the stored-baseline ones (fails or skips
    like B did)."""
    title = f"A/B against {worktree.ref} ({worktree.short})"
    errors = evidence.errors("B")
    if errors:
        pytest.fail(f"{title}: the working tree's test failed in its B worker process:\n{errors[-1]}", pytrace=False)
    reason = _skip_reason(evidence, "B")
    if reason is not None:
        pytest.skip(reason)
    payload = evidence.last_payload("B") or {}
    context = _context(item, int((payload.get("fingerprint") or {}).get("world_size") or 1))
    new = item.nodeid in outcome.new
    if new:
        verdicts = [verdict_from_dict(v) for v in payload.get("verdicts", [])]
        metrics: list[dict[str, Any]] = []
        note = "new: only in the working tree, judged against the stored baselines"
    else:
        a_problem = evidence.errors("A")
        skipped = _skip_reason(evidence, "A")
        note = ""
        if a_problem or skipped:
            why = (a_problem[-1].strip().splitlines() or ["failed"])[-1] if a_problem else f"skipped: {skipped}"
            note = f"REF's side did not measure: {why}"
            for ab in evidence.verdicts:
                if ab.kind in JUDGED_KINDS and ab.judged:
                    ab.status, ab.message = "inconclusive", f"no A measurement ({why})"
        verdicts = [to_verdict(title, ab, _best_samples(evidence, ab.metric)) for ab in evidence.verdicts]
        metrics = [ab.as_dict() for ab in evidence.verdicts]
    if session.settings.update:
        _record_update(session, context, evidence)
    record = {
        "ref": worktree.ref,
        "sha": worktree.sha,
        "side": "new" if new else "both",
        "status": worst_status([m["status"] for m in metrics]) if metrics else "new",
        "metrics": metrics,
        "processes": {"A": sum(1 for e in evidence.a if e), "B": sum(1 for e in evidence.b if e)},
        "note": note,
    }
    return record, VerdictsInstead(verdicts, context)  # the A/B verdicts, not the recorded ones
