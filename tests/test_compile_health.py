"""Compile health: graph breaks and compiled graphs of a ``torch.compile``d step, compared exactly."""

from __future__ import annotations

from collections import Counter

import pytest

from pytest_gpuperf.profiling.compile_health import CompileCounts, compile_metrics, short_reason

REASON = (
    "Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator `print`\n"
    "  Hint: Avoid calling builtin `print`\n"
)


def test_a_step_that_ran_no_compiled_code_gets_no_metric() -> None:
    assert compile_metrics("step", CompileCounts()) == []


def test_the_counts_since_the_test_started_and_the_reason_in_the_hint() -> None:
    before = CompileCounts(Counter({"old": 1}), graphs=2, frames=3)
    after = CompileCounts(Counter({"old": 1, REASON: 2}), graphs=4, frames=7)
    breaks, graphs = compile_metrics("step", after.since(before))
    assert (breaks.name, breaks.value, breaks.tolerance, breaks.better) == ("step.graph_breaks", 2, 0.0, "lower")
    assert (graphs.name, graphs.value) == ("step.compiled_graphs", 2)
    assert "Dynamo does not know how to trace builtin operator `print`" in breaks.extra["regression_hint"]
    assert "Hint" not in short_reason(REASON)


COMPILED_TEST = """
import pytest
import torch

torch.set_num_threads(1)
BREAK = {brk}


def body(x):
    y = torch.tanh(x @ x)
    if BREAK:
        print("", end="")  # a graph break
    return y.sum()


@pytest.mark.gpuperf(informational=("time", "throughput", "cycles", "host_overhead"))
def test_compiled(gpuperf):
    compiled = torch.compile(body, backend="eager")
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    gpuperf.measure(lambda: compiled(x))
"""


def test_a_compiled_step_that_gains_a_graph_break_fails_quoting_it(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_compiled=COMPILED_TEST.format(brk=False))
    recorded = pytester.runpytest("--gpuperf-update", *fast_args)
    recorded.assert_outcomes(passed=1)
    [path] = sorted((pytester.path / "baselines").glob("*.yaml"))
    text = path.read_text()
    assert "step.graph_breaks:\n      value: 0" in text and "step.compiled_graphs:" in text
    pytester.makepyfile(test_compiled=COMPILED_TEST.format(brk=True))
    broken = pytester.runpytest("--gpuperf", *fast_args)
    broken.assert_outcomes(failed=1)
    broken.stdout.fnmatch_lines(["*graph breaks*new graph break(s): *builtin operator*print*"])
