"""Issue 24: an empty or malformed ``--gpuperf-ab`` is a usage error; the A/B Markdown section is escaped."""

from __future__ import annotations

import pytest

from pytest_gpuperf.ab.report import markdown_lines
from tests.test_ab_units import judge
from tests.test_markdown_escape import HOSTILE_ID, HOSTILE_METRIC, _outside_code


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "*--gpuperf-ab was given an empty value (an unset variable?); give a git ref such as origin/main*"),
        ("  ", "*--gpuperf-ab was given an empty value*"),
        ("-x", "*--gpuperf-ab: '-x' looks like an option, not a git ref*"),
        ("main;rm", "*--gpuperf-ab: 'main;rm' is not a plain git ref*"),
        ("a..b", "*--gpuperf-ab: 'a..b' is not a plain git ref*"),
    ],
)
def test_an_empty_or_malformed_ab_ref_is_a_usage_error(pytester: pytest.Pytester, value: str, expected: str) -> None:
    pytester.makepyfile(test_x="def test_x(gpuperf):\n    gpuperf.record('m', 1.0)\n")
    for extra in (["--gpuperf"], []):  # with or without --gpuperf: never "runs without A/B and passes"
        result = pytester.runpytest(*extra, f"--gpuperf-ab={value}", "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([expected])


def _hostile_summary() -> dict:
    metric = judge([1.0, 1.01], [1.5, 1.52]).as_dict()
    metric["label"] = HOSTILE_METRIC
    metric["message"] = f"{HOSTILE_METRIC} regressed <img src=z>"
    category = {**metric, "kind": "category", "status": "changed", "a": "<img src=a>", "b": "[b](https://b.example)"}
    return {
        "ref": "main`<img src=r>`",
        "sha": "0123456789abcdef",
        "tests": {HOSTILE_ID: {"outcome": "failed", "status": "regression", "metrics": [metric, category], "note": ""}},
        "new": [HOSTILE_ID + "new"],
        "removed": [HOSTILE_ID + "old"],
        "warnings": ["<img src=w> built only in the working tree"],
        "processes": {"A": 2, "B": 2, "min": 2, "max": 4},
        "max_time": 0.5,
        "cost_per_test_s": {"A": 3.0, "B": 3.5},
        "worker_errors": [],
    }


def test_the_ab_markdown_section_renders_hostile_ids_names_values_and_refs_as_text() -> None:
    markdown = "\n".join(markdown_lines(_hostile_summary()))
    outside = _outside_code(markdown)
    for raw in ("<img", "](https://", "@octo"):
        assert raw not in outside, (raw, outside)
    rows = [
        line for line in markdown.splitlines() if line.startswith("| ") and ("REGRESSION" in line or "CHANGED" in line)
    ]
    assert len(rows) == 2
    for row in rows:
        cells = [c for c in row.replace("\\|", "").split("|")][1:-1]
        assert len(cells) == 8, cells  # no cell split by a | from the test
    assert "&lt;img src=a&gt;" in markdown and "\\[b\\]\\(https\\://b\\.example\\)" in markdown
