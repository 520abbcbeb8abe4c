"""The files a child shares with the process that started it: its task (written before it is told to run) and its
results (written by the child at its end). Both are JSON, written atomically: a reader never sees half a file.

Standard library only, and no package imports: a child loads this file by path (see :mod:`pytest_gpuperf.procs`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, default=str), encoding="utf-8")
    os.replace(partial, path)


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (OSError when it is missing, ValueError when it is not JSON)."""
    return json.loads(path.read_text(encoding="utf-8"))
