"""Escaping for GitHub-flavoured Markdown: text that came from a test must render as text.

A test id, a metric name or a message can hold backticks, ``<img ...>``, ``[link](url)``,
``|`` (a table cell break), ``#`` or ``@mention``; written raw into ``--gpuperf-markdown`` or
``$GITHUB_STEP_SUMMARY`` it would close code spans, add images or links, or spoof the summary.
"""

from __future__ import annotations

import re
from typing import Any

#: Punctuation that can start markup inside a line (code, emphasis, links, images, cells, strikethrough, math,
#: mentions, issue references, emoji and URL autolinks); each gets a backslash (CommonMark escapes any ASCII
#: punctuation). ``<``, ``>`` and ``&`` become entities instead. Characters that only matter at the start of a
#: line (``+``, ``-``, ``=``) stay, since escaped text never starts a line here.
_PUNCTUATION = set("!#$()*.:@[\\]_`|~")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


#: Invisible characters that reorder or hide text (zero-width, bidi marks, embeddings, overrides, isolates, BOM):
#: raw, a test id could read as another inside a code span; each is shown as a visible ``\uXXXX`` instead.
_INVISIBLE = re.compile(r"[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _one_line(value: Any) -> str:
    flat = re.sub(r"[\r\n\t\f\v]+", " ", str(value))
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", flat)


def text(value: Any) -> str:
    """``value`` as literal Markdown text, also safe inside a table cell (``|`` and newlines included)."""
    out = []
    for char in _one_line(value):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def code(value: Any, in_table: bool = True) -> str:
    """``value`` as an inline code span (``in_table``: inside a table cell).

    The fence is one backtick longer than the longest backtick run inside (so a backtick cannot
    close it); in a table ``|`` is escaped (GFM unescapes it before the span is parsed);
    HTML inside a code span is shown, never rendered.
    """
    content = _one_line(value)
    if in_table:
        content = content.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if content.startswith(("`", " ")) or content.endswith(("`", " ")) else ""
    return f"{fence}{pad}{content}{pad}{fence}"


def fenced(content: str) -> list[str]:
    """A fenced code block holding ``content`` (its fence longer than any backtick run inside)."""
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, content, fence]
