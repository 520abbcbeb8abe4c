"""Baseline files: versioned YAML under ``baselines/``, one file per hardware fingerprint.

* :mod:`.schema`: reading and validating one file (one parse pass, numbers checked);
* :mod:`.store`: rendering and atomic, locked writing;
* :mod:`.update`: what ``--gpuperf-update`` writes (only passed tests; an entry within tolerance is kept as is);
* :mod:`.matching`: baseline keys against the run's test ids (stale entries, a moved rootdir);
* :mod:`.ref` / :mod:`.diff`: baselines read from a git ref, and what the working tree changes against it;
* :mod:`.plugin`: the pytest hooks of all of the above.

Nothing heavy is imported at module level: the plugin loads this package in every pytest run.
"""

from __future__ import annotations

from pytest_gpuperf.baselines.schema import (
    MAX_SAMPLES,
    SCHEMA_VERSION,
    BaselineError,
    BaselineFile,
    entry_problem,
    load_baseline_file,
    parse_baseline_text,
)
from pytest_gpuperf.baselines.store import atomic_write_text, render_baseline, update_baseline_file

__all__ = [
    "MAX_SAMPLES",
    "SCHEMA_VERSION",
    "BaselineError",
    "BaselineFile",
    "atomic_write_text",
    "entry_problem",
    "load_baseline_file",
    "parse_baseline_text",
    "render_baseline",
    "update_baseline_file",
]
