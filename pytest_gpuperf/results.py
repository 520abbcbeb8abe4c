"""Plain data types that flow one way: measure -> compare -> report.

No torch, numpy or yaml here: these types are imported by the plugin module at
start-up, so they must stay cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Better = Literal["higher", "lower", "equal"]
#: ``inconclusive``: the evidence cannot decide at the tolerance (noise, a changed clock, a confirmation that
#: disagreed); it passes with a visible warning unless ``--gpuperf-strict``.
Status = Literal["regression", "improvement", "unchanged", "new", "recorded", "info", "changed", "inconclusive"]

#: Metric kinds decide how a metric is judged (see :mod:`pytest_gpuperf.judging.compare`).
KIND_TIME = "time"
KIND_THROUGHPUT = "throughput"
KIND_MEMORY = "memory"
KIND_CATEGORY = "category"
KIND_CUSTOM = "custom"
#: CUDA: cycles per step (device time x SM clock), clock-invariant; decides the timing verdict when the clock moved.
KIND_CYCLES = "cycles"
#: CUDA: host overhead per step (eager time minus device time), judged at its own, looser tolerance.
KIND_HOST = "host"
#: Kinds judged from their samples (bootstrap of a quantile ratio).
SAMPLED_KINDS = ("time", "throughput", KIND_CYCLES, KIND_HOST)
#: Counted FLOPs or bytes of one step (:mod:`pytest_gpuperf.judging.work`): less is an improvement, more fails.
KIND_WORK = "work"
#: A step's kernel signature (:mod:`pytest_gpuperf.timing.kernel_signature`): a digest, shown, never judged.
KIND_SIGNATURE = "signature"
#: What a signature's metric carries beside its digest into the report (lists: the scalar ``extra`` drops them).
SIGNATURE_KEYS = ("kernels", "baseline_kernels", "launches", "distinct", "source")
#: Kinds whose value is always a number (a custom metric may hold a word, judged like a category).
NUMBER_KINDS = (KIND_TIME, KIND_THROUGHPUT, KIND_MEMORY, KIND_CYCLES, KIND_HOST, KIND_WORK)
#: Kinds an A/B comparison judges by the ratio of B's value to A's (a category is compared word for word).
RATIO_KINDS = (KIND_TIME, KIND_THROUGHPUT, KIND_MEMORY, KIND_CUSTOM)

#: Statuses that fail a test: a regression past the tolerance, a changed category.
FAILING_STATUSES = ("regression", "changed")
#: Order of statuses in reports and A/B summaries: what a reviewer must look at first comes first.
STATUS_ORDER = ("regression", "changed", "inconclusive", "improvement", "new", "unchanged", "recorded", "info")
#: A peak-memory change smaller than this never fails (allocator granularity on tiny tests).
MEMORY_SLACK_BYTES = 64 * 1024


@dataclass
class Metric:
    """One measured quantity of one test, for example ``step.peak_memory``.

    ``samples`` holds the repeated observations the value summarises (per-step
    times, per-step throughputs).
    """

    name: str
    value: float | str
    unit: str
    better: Better = "lower"
    kind: str = KIND_CUSTOM
    samples: list[float] = field(default_factory=list)
    judged: bool = True
    tolerance: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """A readable label: ``step.peak_memory`` -> ``step: peak memory``."""
        prefix, _, metric = self.name.rpartition(".")
        metric = metric.replace("_", " ")
        return f"{prefix}: {metric}" if prefix and prefix != "step" else metric


@dataclass
class Verdict:
    """The judgement of one metric against its baseline."""

    metric: Metric
    status: Status
    baseline: float | str | None = None
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    tolerance: float | None = None
    message: str = ""
    #: For an inconclusive verdict: the status the numbers alone gave, and why they were doubted
    #: (``conditions``: an unsettled or contended run, which a fresh process can clear; ``clock``: a clock band
    #: that straddled the tolerance, which a fresh process that agrees past it decides; ``machine``,
    #: ``spread``, ``confirmation``, ``bound``: doubts another measurement cannot clear).
    suspected: str = ""
    doubt: str = ""
    #: For an inconclusive verdict: the deciding rule's reason (:mod:`pytest_gpuperf.judging.evidence`).
    reason: str = ""

    @property
    def failed(self) -> bool:
        """True when this verdict should fail the test."""
        return self.status in FAILING_STATUSES


def worst_status(statuses: Iterable[str]) -> str:
    """The first of ``statuses`` in :data:`STATUS_ORDER` (``info`` for none)."""
    present = set(statuses)
    return next((status for status in STATUS_ORDER if status in present), "info")


class GpuperfWarning(UserWarning):
    """Shown in pytest's warnings summary: an inconclusive verdict that passed, a tolerance below the noise."""


#: Attribute of a call-phase ``TestReport`` that carries the test's verdicts (survives pytest-xdist).
REPORT_ATTR = "gpuperf"


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """A JSON-able form of a verdict, carried on the test report (survives pytest-xdist); a kernel signature's
    also its kernels (``signature``)."""
    metric = verdict.metric
    signature = metric.kind == KIND_SIGNATURE
    return {
        "metric": metric.name,
        "label": metric.label(),
        "value": metric.value,
        "unit": metric.unit,
        "better": metric.better,
        "kind": metric.kind,
        "status": verdict.status,
        "baseline": verdict.baseline,
        "ratio": verdict.ratio,
        "ci": list(verdict.ci) if verdict.ci else None,
        "tolerance": verdict.tolerance,
        "message": verdict.message,
        "doubt": verdict.doubt,
        "reason": verdict.reason,
        "samples": len(metric.samples),
        "sample_values": list(metric.samples),  # raw samples, for the JSON report (pytest-benchmark stats)
        "extra": {k: v for k, v in metric.extra.items() if isinstance(v, (int, float, str, bool))},
        **({"signature": {k: metric.extra[k] for k in SIGNATURE_KEYS if k in metric.extra}} if signature else {}),
    }


def verdict_from_dict(data: dict[str, Any]) -> Verdict:
    """The verdict that :func:`verdict_to_dict` wrote (its metric's samples from ``sample_values``; a metric whose
    status is ``info`` is not judged). A worker's verdicts come back to its controller this way (A/B)."""
    metric = Metric(
        str(data["metric"]),
        data.get("value"),  # type: ignore[arg-type]
        str(data.get("unit", "")),
        data.get("better", "lower"),
        str(data.get("kind", KIND_CUSTOM)),
        samples=list(data.get("sample_values") or []),
        judged=data.get("status") != "info",
        tolerance=data.get("tolerance"),
        extra={**(data.get("extra") or {}), **(data.get("signature") or {})},
    )
    ci = data.get("ci")
    return Verdict(
        metric,
        data.get("status", "new"),
        data.get("baseline"),
        data.get("ratio"),
        (float(ci[0]), float(ci[1])) if ci else None,
        data.get("tolerance"),
        str(data.get("message", "")),
        doubt=str(data.get("doubt") or ""),
        reason=str(data.get("reason") or ""),
    )
