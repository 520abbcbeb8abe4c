"""Compile health as metrics: the graph breaks and compiled graphs of a step that runs ``torch.compile``d code.

A graph break splits a compiled function into pieces with Python between them; it can cost little on one device
and much on another, and a refactor adds one silently (a ``print``, a data-dependent branch, an unsupported call).
So for every measured step during which TorchDynamo traced a frame, two counts are recorded and compared exactly,
like ``host_syncs``: ``<step>.graph_breaks`` (graph breaks dynamo took since the test started, by its own counters)
and ``<step>.compiled_graphs`` (graphs compiled since the test started: a step that recompiles on every call reaches
dynamo's cache limit). A new graph break fails the test and the message quotes dynamo's reason. A step that never
ran compiled code gets neither metric, and nothing here imports torch._dynamo: the counters are read only when
torch already loaded it.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_gpuperf.results import KIND_CUSTOM, Metric

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.extensions import MeasureContext

#: Characters of a graph break's reason quoted in a failure (dynamo's reasons run to several paragraphs).
REASON_CHARS = 300


@dataclass(frozen=True)
class CompileCounts:
    """TorchDynamo's counters at one moment: graph breaks by reason, compiled graphs, traced frames."""

    breaks: Counter[str] = field(default_factory=Counter)
    graphs: int = 0
    frames: int = 0

    def since(self, before: CompileCounts) -> CompileCounts:
        """What happened between ``before`` and this moment."""
        return CompileCounts(self.breaks - before.breaks, self.graphs - before.graphs, self.frames - before.frames)


def read_counts() -> CompileCounts:
    """The counters now (all zero while torch has not loaded TorchDynamo)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return CompileCounts()
    breaks = Counter({str(k): int(v) for k, v in counters.get("graph_break", {}).items()})
    stats, frames = counters.get("stats", {}), counters.get("frames", {})
    return CompileCounts(breaks, int(stats.get("unique_graphs", 0)), int(frames.get("total", 0)))


def short_reason(reason: str) -> str:
    """A graph break's reason in one line: its first sentence and dynamo's explanation, bounded."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    head = " ".join(lines[:2]).replace("Explanation: ", "")
    return head if len(head) <= REASON_CHARS else head[: REASON_CHARS - 3] + "..."


def compile_metrics(name: str, delta: CompileCounts) -> list[Metric]:
    """``<name>.graph_breaks`` and ``<name>.compiled_graphs``; none when dynamo traced nothing."""
    if delta.frames <= 0 and delta.graphs <= 0 and not delta.breaks:
        return []
    reasons = [short_reason(reason) for reason in delta.breaks]
    breaks_extra = {
        "note": "TorchDynamo graph breaks since the test started",
        "reasons": reasons,
        "regression_hint": "new graph break(s): " + "; ".join(reasons) if reasons else "a new graph break",
    }
    graphs_extra = {
        "note": "graphs TorchDynamo compiled since the test started",
        "regression_hint": "the step compiles more graphs (recompiles: torch._logging.set_logs(recompiles=True) "
        "says why)",
    }
    return [
        Metric(f"{name}.graph_breaks", sum(delta.breaks.values()), "", "lower", KIND_CUSTOM, tolerance=0.0,
               extra=breaks_extra),
        Metric(f"{name}.compiled_graphs", delta.graphs, "", "lower", KIND_CUSTOM, tolerance=0.0, extra=graphs_extra),
    ]


class CompileHealth:
    """Per test: the counters when it started; per measured step: its compile metrics (the count hook)."""

    def __init__(self) -> None:
        self.started: dict[str, CompileCounts] = {}

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Remember the counters before the test (its fixtures and body may compile)."""
        self.started[item.nodeid] = read_counts()

    def pytest_gpuperf_after_measure(self, context: MeasureContext) -> list[Metric]:
        """The step's graph breaks and compiled graphs since its test started (or since its previous step)."""
        node_id = context.test.node_id
        now = read_counts()
        before = self.started.get(node_id, CompileCounts())
        self.started[node_id] = now
        return compile_metrics(context.name, now.since(before))
