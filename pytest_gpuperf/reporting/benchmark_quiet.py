"""pytest-benchmark (a dependency) stays out of sight unless a test uses its ``benchmark`` fixture.

pytest-benchmark prints a ``benchmark: 5.3.1 (defaults: ...)`` header in every run and creates its
storage folder (``.benchmarks/``) when it configures, whether or not any test benchmarks. This plugin

* moves that header line after collection, and prints it only when a collected test uses the fixture;
* removes the storage folder at the end of the run when this run created it, it is empty and no collected
  test used the fixture.

None of pytest-benchmark's options change (``--benchmark-*`` keep their meaning and defaults), and a user of
the fixture sees exactly what pytest-benchmark prints and saves. Cheap: a few ``Path`` checks per run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

#: pytest-benchmark's plugin name (its ``pytest11`` entry point) and the fixtures that benchmark.
PLUGIN = "benchmark"
FIXTURES = ("benchmark", "benchmark_weave")
HEADER_PREFIX = "benchmark: "
#: The storage folder pytest-benchmark is about to create, and whether it existed before this run.
STORAGE_KEY = pytest.StashKey[tuple[Path, bool]]()
USED_KEY = pytest.StashKey[bool]()


def storage_folder(config: pytest.Config) -> Path | None:
    """The folder pytest-benchmark's file storage uses (``--benchmark-storage``, default ``./.benchmarks``)."""
    storage = config.getoption("benchmark_storage", default=None)
    if not isinstance(storage, str) or not storage:
        return None
    if "://" in storage:
        scheme, _, rest = storage.partition("://")
        if scheme != "file":
            return None  # elasticsearch and the like: nothing on disk
        storage = rest
    return Path(os.getcwd(), storage).resolve()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-benchmark configures (trylast): note whether its storage folder exists already."""
    if not config.pluginmanager.hasplugin(PLUGIN):
        return
    folder = storage_folder(config)
    if folder is not None:
        config.stash[STORAGE_KEY] = (folder, folder.exists())


@pytest.hookimpl(hookwrapper=True)
def pytest_report_header(config: pytest.Config) -> Any:
    """Drop pytest-benchmark's header line from the session header (it comes back after collection if used)."""
    outcome = yield
    if not config.pluginmanager.hasplugin(PLUGIN):
        return
    kept = [line for line in outcome.get_result() if not (isinstance(line, str) and line.startswith(HEADER_PREFIX))]
    outcome.force_result(kept)


def uses_benchmark(items: list[pytest.Item]) -> bool:
    """True when a collected test requests pytest-benchmark's fixture."""
    return any(name in FIXTURES for item in items for name in getattr(item, "fixturenames", ()))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Remember whether a selected test benchmarks (its storage folder is then pytest-benchmark's to keep)."""
    config.stash[USED_KEY] = config.stash.get(USED_KEY, False) or uses_benchmark(items)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """pytest-benchmark's header, after collection, when a collected test uses its fixture."""
    if not config.pluginmanager.hasplugin(PLUGIN) or not uses_benchmark(items):
        return []
    plugin = config.pluginmanager.get_plugin(PLUGIN)
    header = getattr(plugin, "pytest_report_header", None)
    try:
        line = header(config) if header is not None else None
    except Exception:  # noqa: BLE001 - another pytest-benchmark version: its header is not ours to fix
        return []
    return [line] if isinstance(line, str) else list(line or [])


def _empty(folder: Path) -> bool:
    return folder.is_dir() and all(_empty(child) for child in folder.iterdir())


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the storage folder this run created when it stayed empty and no test benchmarked."""
    noted = config.stash.get(STORAGE_KEY, None)
    if noted is None or noted[1] or config.stash.get(USED_KEY, False):
        return
    folder = noted[0]
    try:
        if _empty(folder):
            for child in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                child.rmdir()
            folder.rmdir()
    except OSError:
        pass  # another process (an xdist worker) removed or filled it meanwhile
