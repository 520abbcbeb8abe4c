"""Where a judging service reads a test's baseline entries: the baseline files, or what a rank was sent.

* :class:`FileBaselines`: files under ``gpuperf_baselines`` keyed by fingerprint and world size, read once
  each through one loader (the working tree's, or a git ref's from ``pytest_gpuperf_baseline_loader``);
* :class:`FixedBaselines`: the entries the pytest process looked up for one test, sent with a rank or
  fresh-process task so it plans against exactly what judges it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings

#: Reads one baseline file (None when it does not exist).
Loader = Callable[[Path], "BaselineFile | None"]
Entries = dict[str, dict[str, Any]]


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

    def file(self, context: TestContext) -> BaselineFile | None:
        """The whole baseline file of the test's fingerprint (None when absent or not known here)."""
        ...


class FileBaselines:
    """Baseline files under ``settings.baselines_dir``, read once each through ``loader``."""

    def __init__(self, settings: Settings, loader: Callable[[], Loader | None] | None = None) -> None:
        self.settings = settings
        self._loader_factory = loader
        self._loader: Loader | None = None
        self._fingerprints: dict[tuple[str, int], dict[str, Any]] = {}
        self._files: dict[Path, BaselineFile | None] = {}

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The backend's fingerprint plus the context's world size (cached per backend and size)."""
        key = (context.backend.name, context.world_size)
        if key not in self._fingerprints:
            self._fingerprints[key] = {**context.backend.fingerprint(), "world_size": context.world_size}
        return self._fingerprints[key]

    def path(self, context: TestContext) -> Path:
        """Where the baselines of the context's fingerprint live."""
        from pytest_gpuperf.fingerprint import baseline_filename

        return self.settings.baselines_dir / baseline_filename(self.fingerprint(context))

    def loader(self) -> Loader:
        """The loader in use: a feature's (asked once, lazily), else the working tree's files."""
        if self._loader is None:
            from pytest_gpuperf.baselines import load_baseline_file

            self._loader = (self._loader_factory() if self._loader_factory else None) or load_baseline_file
        return self._loader

    def file(self, context: TestContext) -> BaselineFile | None:
        """The loaded baseline file of the context (None if absent); errors fail the test naming file and line."""
        import pytest

        from pytest_gpuperf.baselines import BaselineError
        from pytest_gpuperf.fingerprint import identity

        path = self.path(context)
        if path not in self._files:
            fingerprint = self.fingerprint(context)
            problem = None
            try:
                loaded = self.loader()(path)
                if loaded is not None and identity(loaded.fingerprint) != identity(fingerprint):
                    raise BaselineError(
                        path,
                        f"its fingerprint {identity(loaded.fingerprint)} does not match this machine's "
                        f"{identity(fingerprint)}; the file name and its content disagree",
                        2,
                    )
            except BaselineError as exc:
                problem = f"pytest-gpuperf: {exc}"
            if problem is not None:
                pytest.fail(problem, pytrace=False)  # outside the except: no "During handling of ..." echo
            self._files[path] = loaded
        return self._files[path]

    def entries(self, context: TestContext) -> Entries:
        """The test's recorded metrics in its baseline file (``{}`` when none)."""
        baseline = self.file(context)
        if baseline is None:
            return {}
        from pytest_gpuperf.backends.selection import backend_first_id  # entries recorded when the backend came first

        found = baseline.tests.get(context.node_id)
        legacy = backend_first_id(context.node_id, context.backend.name)
        return dict(found or (baseline.tests.get(legacy) if legacy else None) or {})


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

    def file(self, context: TestContext) -> BaselineFile | None:
        """Ranks see only their test's entries, never a whole file."""
        return None

    def entries(self, context: TestContext) -> Entries:
        """The entries sent with the task."""
        return dict(self._entries)
