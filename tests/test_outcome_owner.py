"""One owner of a test's outcome: the session's one ``pytest_runtest_makereport`` decides pass or fail; features
contribute through the hooks of ``pytest_gpuperf.hookspecs`` (their own verdicts, failure reasons, sections)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import pytest_gpuperf

CONFTEST = """
from pytest_gpuperf.backends import get_backend
from pytest_gpuperf.context import build_context
from pytest_gpuperf.hookspecs import FailureReason, ReportSection, SummarySection, VerdictsInstead
from pytest_gpuperf.results import Metric, Verdict


def pytest_gpuperf_replace_verdicts(item, verdicts):
    if "replaced" not in item.name:
        return None
    assert verdicts and all(v.metric.name.startswith("step.") for v in verdicts)  # the stored-baseline ones
    metric = Metric("step.score", 2.0, "pt", "lower", "custom")
    verdict = Verdict(metric, "regression", 1.0, 2.0, None, 0.05, "score 2.00 pt > baseline 1.00 pt (+100.0%)")
    return VerdictsInstead([verdict], build_context(item.nodeid, get_backend("cpu"), {}, None))


def pytest_gpuperf_failure_reasons(item, verdicts):
    if "reason" in item.name:
        return [FailureReason("mine", "my feature: the step is too round", "too round")]
    return None


def pytest_gpuperf_report_sections(item):
    return [ReportSection("mine", "my section", "a section text", (("mine.prop", "yes"),), payload={"mine": 1})]


def pytest_gpuperf_summary_sections(config, records):
    lines = tuple((f"{r.nodeid}: mine={r.data.get('mine')}", {}) for r in records)
    return [SummarySection("my summary block", lines, markdown="**my block**", json={"mine": len(records)})]
"""

TESTS = """
def test_replaced(gpuperf):
    gpuperf.measure(lambda: sum(range(100)), memory=False)


def test_reason(gpuperf):
    gpuperf.measure(lambda: sum(range(100)), memory=False)


def test_plain(gpuperf):
    gpuperf.measure(lambda: sum(range(100)), memory=False)
"""


def test_features_replace_verdicts_add_failure_reasons_and_sections_through_hooks(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_owner=TESTS)
    result = pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-json", "out.json", "--gpuperf-markdown", "o.md")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "FAILED test_owner.py::test_replaced[[]cpu[]] - score *",
            "FAILED test_owner.py::test_reason[[]cpu[]] - my feature: the step is too round",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(["*my summary block*", "test_owner.py::test_replaced[[]cpu[]]: mine=1"])
    assert "a section text" in result.stdout.str()  # the report section, printed under the failures
    document = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].rpartition("::")[2]: t for t in document["gpuperf"]["tests"]}
    assert [m["metric"] for m in tests["test_replaced[cpu]"]["metrics"]] == ["step.score"]
    assert tests["test_replaced[cpu]"]["status"] == "regression" and tests["test_replaced[cpu]"]["outcome"] == "failed"
    assert tests["test_reason[cpu]"]["outcome"] == "failed" and tests["test_plain[cpu]"]["outcome"] == "passed"
    assert document["gpuperf"]["mine"] == 3
    assert "**my block**" in (pytester.path / "o.md").read_text()


def _makereports(path: Path) -> list[tuple[str, bool]]:
    """(module, is a wrapper) of every ``pytest_runtest_makereport`` defined in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == "pytest_runtest_makereport":
            wrapper = any(
                isinstance(k, ast.keyword) and k.arg in ("hookwrapper", "wrapper")
                for d in node.decorator_list
                if isinstance(d, ast.Call)
                for k in d.keywords
            )
            found.append((path.name, wrapper))
    return found


def test_only_the_session_wraps_makereport_or_sets_a_report_outcome() -> None:
    package = Path(pytest_gpuperf.__file__).parent
    wrappers, setters = [], []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        wrappers += [rel for _, wrapper in _makereports(path) if wrapper]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr in ("outcome", "longrepr"):
                        if isinstance(target.value, ast.Name) and target.value.id == "report":
                            setters.append(rel)
    assert wrappers == ["session.py"]
    assert set(setters) == {"session.py"}
