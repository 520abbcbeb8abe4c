"""Where the judging service reads a test's baseline entries: the protocol every baseline source implements.

* :class:`BaselineSource`: the protocol. The file-backed source
  (:class:`pytest_gpuperf.baselines.sources.FileBaselines`: the working tree's files or a git ref's) lives with
  the baseline store and is handed to the service by whoever builds it (the session);
* :class:`FixedBaselines`: the entries the pytest process looked up for one test, sent with a rank or
  fresh-process task so it plans against exactly what judges it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_gpuperf.context import TestContext

#: A test's recorded metrics: metric name -> entry.
Entries = dict[str, dict[str, Any]]


class StoredFile(Protocol):
    """What the service reads of a whole baseline file: the fingerprint it was recorded under."""

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The hardware and software fingerprint stored in the file."""
        ...


class BaselineSource(Protocol):
    """Where a judging service reads a test's baseline entries from."""

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The hardware fingerprint (with world size) the test's baselines are keyed by."""
        ...

    def path(self, context: TestContext) -> Path:
        """The baseline file of the test's fingerprint."""
        ...

    def entries(self, context: TestContext) -> Entries:
        """The test's recorded metrics (``{}`` without a baseline); errors name file and line."""
        ...

    def file(self, context: TestContext) -> StoredFile | None:
        """The whole baseline file of the test's fingerprint (None when absent or not known here)."""
        ...


class FixedBaselines:
    """The entries the pytest process looked up for one test, sent to the ranks that measure it (picklable)."""

    def __init__(self, entries: Entries, fingerprint: dict[str, Any] | None = None, path: str = "") -> None:
        self._entries = dict(entries)
        self._fingerprint = dict(fingerprint or {})
        self._path = path

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The fingerprint the pytest process judged with (the rank's own when none was sent)."""
        return self._fingerprint or {**context.backend.fingerprint(), "world_size": context.world_size}

    def path(self, context: TestContext) -> Path:
        """The file the entries came from (informational on a rank)."""
        return Path(self._path)

    def file(self, context: TestContext) -> None:
        """Ranks see only their test's entries, never a whole file."""
        return None

    def entries(self, context: TestContext) -> Entries:
        """The entries sent with the task."""
        return dict(self._entries)
