"""Markdown/HTML injection: everything that came from a test is escaped in --gpuperf-markdown and the step summary."""

from __future__ import annotations

import re

import pytest

from pytest_gpuperf.reporting.md_escape import code, fenced, text

HOSTILE_ID = "x`<img src=x onerror=alert(1)>`|[a](https://e.example)#@octo"
HOSTILE_METRIC = "<img src=y>|`m`[b](https://f.example)"
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.*?)(?<!`)\1(?!`)")


FENCED_BLOCK = re.compile(r"^(`{3,})\n.*?\n\1$", re.S | re.M)


def _outside_code(markdown: str) -> str:
    return CODE_SPAN.sub("", FENCED_BLOCK.sub("", markdown))


def test_text_escapes_html_and_markdown_punctuation() -> None:
    assert text("<img src=x>") == "&lt;img src=x&gt;"
    assert text("[a](u) `c` |d| #e @f *g* _h_") == "\\[a\\]\\(u\\) \\`c\\` \\|d\\| \\#e \\@f \\*g\\* \\_h\\_"
    assert text("a\nb\r\nc") == "a b c"
    assert text("&amp;") == "&amp;amp;"  # renders as the five characters &amp;
    assert text("www.e.example https://x +1.5% $x$ :smile:") == (
        "www\\.e\\.example https\\://x +1\\.5% \\$x\\$ \\:smile\\:"
    )


def test_code_spans_cannot_be_closed_from_inside() -> None:
    assert code("plain") == "`plain`"
    assert code("a`b") == "``a`b``"
    assert code("`edge`") == "`` `edge` ``"
    assert code("a|b") == "`a\\|b`" and code("a|b", in_table=False) == "`a|b`"
    assert fenced("x ``` y") == ["````", "x ``` y", "````"]


RECORDING = f"""
import pytest

@pytest.mark.parametrize("name", [{HOSTILE_ID!r}])
def test_hostile(gpuperf, name):
    gpuperf.record({HOSTILE_METRIC!r}, VALUE, "s")
"""


def test_hostile_ids_and_metric_names_render_as_text(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_h="VALUE = 1.0\n" + RECORDING)
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_h="VALUE = 2.0\n" + RECORDING)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.runpytest("--gpuperf", *fast_args, "--gpuperf-markdown", "pr.md").assert_outcomes(failed=1)
    markdown = (pytester.path / "pr.md").read_text()
    assert summary.read_text() == markdown + "\n"
    outside = _outside_code(markdown)
    for raw in ("<img", "](https", "`<", "@octo"):
        assert raw not in outside, raw
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and "REGRESSION" in line]
    assert len(rows) == 1
    cells = re.split(r"(?<!\\)\|", rows[0])[1:-1]
    assert len(cells) == 7, cells  # no cell was split by a | from the test
    assert cells[0].strip().startswith("``") and "<img src=x onerror=alert(1)>" in cells[0]  # shown as code
    assert "&lt;img src=y&gt;" in cells[1]
    # the re-record command is a fenced block whose fence the id cannot close, with the id shell-quoted
    block = markdown.split("If intended, record the new numbers with:")[1]
    fence = block.split()[0]
    assert set(fence) == {"`"} and fence not in HOSTILE_ID
    assert "pytest --gpuperf --gpuperf-update 'test_h.py::test_hostile[" in block
