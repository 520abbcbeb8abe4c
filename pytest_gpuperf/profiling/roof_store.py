"""Where measured roofs are kept: pytest's cache, one entry per hardware fingerprint, and the measuring lock.

Entries live under ``.pytest_cache/v/gpuperf/roofs/`` (pytest keeps the folder out of git and writes each JSON file
atomically); an entry of another :data:`CACHE_VERSION` is measured again. While one process measures, the others
(pytest-xdist workers, A/B workers) wait on a file lock next to the cache, then read what it stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_gpuperf.backends.fingerprint import baseline_filename

CACHE_PREFIX = "gpuperf/roofs/"
CACHE_VERSION = 3


def cache_key(fingerprint: dict[str, Any]) -> str:
    """Fingerprint identity as a readable key (the baseline file's stem, plus CPU threads)."""
    key = baseline_filename(fingerprint).removesuffix(".yaml")
    if fingerprint.get("threads"):
        key += f"-t{fingerprint['threads']}"
    return key


class RoofStore:
    """Roof entries in pytest's cache (``config.cache``); in memory only when the cache provider is off."""

    def __init__(self, cache: Any | None) -> None:
        self.cache = cache
        self._memory: dict[str, dict[str, Any]] = {}

    @property
    def where(self) -> str:
        """Where entries live, for the report."""
        return "pytest's cache (.pytest_cache/v/gpuperf/roofs/)" if self.cache is not None else "memory only"

    def load(self, key: str, fresh: bool = False) -> dict[str, Any] | None:
        """The entry of ``key`` (None when missing, broken or of another version); ``fresh``: read the file again."""
        if key in self._memory and not fresh:
            return self._memory[key]
        entry = self.cache.get(CACHE_PREFIX + key, None) if self.cache is not None else None
        if not isinstance(entry, dict) or entry.get("version") != CACHE_VERSION:
            return None
        if not isinstance(entry.get("compute"), dict):
            return None
        return entry

    @contextmanager
    def measuring(self) -> Iterator[None]:
        """Hold the machine's roof-measuring lock: one process measures, the others (xdist, A/B workers) wait.

        A file lock next to pytest's cache (``.pytest_cache/d/gpuperf-roofs/measure.lock``); in memory only, or
        where file locks are not available, no lock.
        """
        folder = getattr(self.cache, "mkdir", None)  # pytest's Cache has one; an in-memory stand-in has none
        if folder is None:
            yield
            return
        try:
            import fcntl

            handle = (Path(folder("gpuperf-roofs")) / "measure.lock").open("a")
        except (ImportError, OSError):
            yield
            return
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def store(self, key: str, entry: dict[str, Any]) -> None:
        """Keep ``entry`` for ``key`` (pytest's cache writes its JSON file atomically)."""
        entry["version"] = CACHE_VERSION
        self._memory[key] = entry
        if self.cache is not None:
            self.cache.set(CACHE_PREFIX + key, entry)
