"""Writing report files: atomically where the file is ours, cut back where a shared one failed mid-append."""

from __future__ import annotations

import contextlib
from pathlib import Path


def write_report(path: Path, text: str) -> None:
    """Write a report atomically (a temporary file renamed over it): a full disk never leaves half a file."""
    from pytest_gpuperf.baselines.store import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def append_report(path: Path, text: str) -> None:
    """Append ``text`` to a file others write too (``$GITHUB_STEP_SUMMARY``); a failed append is cut off again."""
    with open(path, "a", encoding="utf-8") as handle:
        start = handle.tell()
        try:
            handle.write(text)
            handle.flush()
        except OSError:
            with contextlib.suppress(OSError):
                handle.truncate(start)
            raise
