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

_HOME = {name: "schema" for name in __all__} | {
    "atomic_write_text": "store",
    "render_baseline": "store",
    "update_baseline_file": "store",
}


def __getattr__(name: str) -> object:
    """Re-export the reader's and writer's names lazily: a plain pytest run loads only the plugin module."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
