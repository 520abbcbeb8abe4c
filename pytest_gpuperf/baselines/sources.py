"""The file-backed baseline source: baseline files keyed by fingerprint and world size.

:class:`FileBaselines` implements the judging service's source protocol
(:class:`pytest_gpuperf.judging.sources.BaselineSource`): files under ``gpuperf_baselines``, read once each
through one loader (the working tree's, or a git ref's from ``pytest_gpuperf_baseline_loader``). The session
hands it to the service; a rank gets :class:`~pytest_gpuperf.judging.sources.FixedBaselines` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.judging.sources import BaselineSource, Entries, FixedBaselines

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.context import TestContext
    from pytest_gpuperf.settings import Settings

__all__ = ["BaselineSource", "Entries", "FileBaselines", "FixedBaselines", "Loader"]

#: Reads one baseline file (None when it does not exist).
Loader = Callable[[Path], "BaselineFile | None"]


class FileBaselines:
    """Baseline files under ``settings.baselines_dir``, read once each through ``loader``."""

    def __init__(self, settings: Settings, loader: Callable[[], Loader | None] | None = None) -> None:
        self.settings = settings
        self._loader_factory = loader
        self._loader: Loader | None = None
        self._fingerprints: dict[tuple[str, int], dict[str, Any]] = {}
        self._files: dict[Path, BaselineFile | None] = {}
        #: A file that failed to load: the test that said why (its message is said once per file and session).
        self._broken: dict[Path, str] = {}

    def fingerprint(self, context: TestContext) -> dict[str, Any]:
        """The backend's fingerprint plus the context's world size (cached per backend and size)."""
        key = (context.backend.name, context.world_size)
        if key not in self._fingerprints:
            self._fingerprints[key] = {**context.backend.fingerprint(), "world_size": context.world_size}
        return self._fingerprints[key]

    def path(self, context: TestContext) -> Path:
        """Where the baselines of the context's fingerprint live."""
        from pytest_gpuperf.backends.fingerprint import baseline_filename

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

        from pytest_gpuperf.backends.fingerprint import identity
        from pytest_gpuperf.baselines import BaselineError

        path = self.path(context)
        if path in self._broken:  # read once: every later test of the file fails with a pointer, not the message again
            pytest.fail(f"pytest-gpuperf: {path}: not a valid baseline file ({self._broken[path]})", pytrace=False)
        if path not in self._files:
            fingerprint = self.fingerprint(context)
            problem = None
            try:
                loaded = self._load(path)
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
                self._broken[path] = f"the failure of {context.node_id} says why and how to fix it"
                pytest.fail(problem, pytrace=False)  # outside the except: no "During handling of ..." echo
            self._files[path] = loaded
        return self._files[path]

    def _load(self, path: Path) -> BaselineFile | None:
        """The file through the loader; under ``--gpuperf-update`` the working tree's file is read for repair
        (an entry the reader refuses is left out, and dropped when the file is written), so one bad entry never
        blocks the update that replaces it."""
        from pytest_gpuperf.baselines import load_baseline_file

        loader = self.loader()
        if self.settings.update and loader is load_baseline_file:
            return load_baseline_file(path, dropped=[])
        return loader(path)

    def entries(self, context: TestContext) -> Entries:
        """The test's recorded metrics in its baseline file (``{}`` when none)."""
        baseline = self.file(context)
        if baseline is None:
            return {}
        from pytest_gpuperf.backends.selection import backend_first_id  # entries recorded when the backend came first

        found = baseline.tests.get(context.node_id)
        legacy = backend_first_id(context.node_id, context.backend.name)
        return dict(found or (baseline.tests.get(legacy) if legacy else None) or {})
