"""Writing baseline files: stable rendering, a cross-platform lock, atomic replacement.

A writer takes an exclusive lock (``filelock``; its lock file is ``.gpuperf.lock`` in the
baselines folder itself, so two writers of one folder share it whatever their ``HOME``
or ``XDG_*``, and a ``.gitignore`` there keeps it and temp files out of ``git add``), re-reads
the file, replaces only the entries it was given, writes a temporary file in the
same directory with the old file's permissions and renames it over the old one.
So a crash never leaves half a file, concurrent pytest-xdist workers never lose
each other's entries, and a ``0644`` file stays ``0644``. Temporary files are
only created while the lock is held, so any found under the lock belong to a
writer that died: they are swept. A file that cannot be parsed, has another
schema version or would receive an entry the reader refuses is never written.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_gpuperf.baselines.schema import (
    RETIRED_FIELDS,
    SCHEMA_VERSION,
    BaselineError,
    BaselineFile,
    entry_problem,
)

METRIC_FIELD_ORDER = ("value", "unit", "better", "kind", "samples", "extra")
SAMPLES_KEPT = 30
#: Seconds to wait for another writer before giving up with an error.
LOCK_TIMEOUT = 300.0
_TEMP_PATTERN = re.compile(r"^\..+\.yaml\.[^.]+\.tmp$")
HEADER = (
    "# pytest-gpuperf baselines for one hardware fingerprint. Written by `pytest --gpuperf --gpuperf-update`;\n"
    "# review changes in the PR diff. Units: B = bytes, s = seconds per step.\n"
)


def _plain(value: Any) -> Any:
    """Coerce str/int/float subclasses (torch's TorchVersion, numpy scalars) to the builtins safe_dump knows."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        return _plain(value.item())
    return str(value)


def _round(value: Any) -> Any:
    value = _plain(value)
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return float(f"{value:.6g}")
    return value


def ordered_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One metric entry as written: fixed field order, 6 significant digits, at most 30 samples."""
    ordered: dict[str, Any] = {}
    for key in METRIC_FIELD_ORDER:
        value = _plain(entry.get(key))
        if value not in (None, [], {}):
            if isinstance(value, list):
                value = [_round(v) for v in value[:SAMPLES_KEPT]]
            elif isinstance(value, dict):
                value = {k: _round(v) for k, v in sorted(value.items())}
            else:
                value = _round(value)
            ordered[key] = value
    for key in sorted(set(entry) - set(METRIC_FIELD_ORDER) - RETIRED_FIELDS):
        ordered[key] = _plain(entry[key])
    return ordered


def render_baseline(baseline: BaselineFile) -> str:
    """Serialise a baseline file's stored entries with a stable key order and flow-style sample lists."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        flow = all(isinstance(v, (int, float)) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(list, _represent_list)
    tests = baseline.stored
    document = {
        "schema_version": SCHEMA_VERSION,
        "fingerprint": {k: _plain(baseline.fingerprint[k]) for k in sorted(baseline.fingerprint)},
        "tests": {
            test_id: {name: ordered_entry(tests[test_id][name]) for name in sorted(tests[test_id])}
            for test_id in sorted(tests)
        },
    }
    collecting = gc.isenabled()
    gc.disable()  # the emitter makes ~10^5 short-lived objects per 1,000 tests; full collections would triple it
    try:
        return HEADER + yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
    finally:
        if collecting:
            gc.enable()


#: The update lock: a file in the baselines folder itself, so every writer of one folder takes the same lock
#: whatever its environment (``HOME``, ``XDG_*``), and a writable folder is all an update needs.
LOCK_NAME = ".gpuperf.lock"
#: What ``git add baselines/`` must never pick up: the lock and a killed writer's temporary files.
IGNORED = (LOCK_NAME, ".*.tmp")
_GITIGNORE_NOTE = "# written by pytest-gpuperf: its update lock and temporary files are never committed\n"


def lock_path(directory: Path) -> Path:
    """The lock file of a baselines directory: ``<directory>/.gpuperf.lock``."""
    return directory / LOCK_NAME


def ignore_own_files(directory: Path) -> None:
    """Make ``git`` ignore the lock and temp files: a ``.gitignore`` in ``directory`` naming them (created or
    completed; a line the user already has is not repeated)."""
    path = directory / ".gitignore"
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError):
        return  # an unreadable .gitignore is the user's; the lock still works
    missing = [p for p in IGNORED if p not in text.splitlines()]
    if not missing:
        return
    head = "" if text else _GITIGNORE_NOTE
    sep = "" if not text or text.endswith("\n") else "\n"
    with contextlib.suppress(OSError):
        atomic_write_text(path, text + sep + head + "".join(f"{p}\n" for p in missing))


@contextlib.contextmanager
def directory_lock(directory: Path, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Exclusive lock on ``directory`` across threads and processes (xdist workers, separate runs), any OS.

    The lock file is :func:`lock_path` (``filelock``: ``flock`` on POSIX); a symlink in its place is refused.
    """
    from filelock import FileLock, Timeout

    path = lock_path(directory)
    if path.is_symlink():
        raise OSError(f"the update lock {path} is a symlink; refusing to follow it (remove it)")
    ignore_own_files(directory)
    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout as exc:
        raise OSError(f"another pytest-gpuperf process held the lock {path} for more than {timeout:.0f} s") from exc
    try:
        yield
    finally:
        lock.release()


def sweep_stale_temp_files(directory: Path) -> list[Path]:
    """Remove ``.<name>.yaml.<random>.tmp`` files left by a writer that died (call with the lock held)."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if _TEMP_PATTERN.match(entry.name) and entry.is_file():
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half-written; mode kept)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _new_file_mode()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def check_entries(path: Path, entries: dict[str, dict[str, dict[str, Any]] | None]) -> None:
    """Refuse (:class:`BaselineError`) to write any test id, metric name or entry the reader would refuse."""
    from pytest_gpuperf.validate import MAX_TEST_ID, name_problem

    for test_id, metrics in sorted(entries.items()):
        problem = name_problem(test_id, "test id", MAX_TEST_ID)
        if problem:
            raise BaselineError(path, f"refusing to record {problem}", hint="nothing was written")
        for name, entry in sorted((metrics or {}).items()):
            problem = name_problem(name) or entry_problem(ordered_entry(entry))
            if problem:
                raise BaselineError(
                    path,
                    f"refusing to record metric {name!r} of {test_id!r}: {problem}",
                    hint="nothing was written, so the reader never meets an entry it refuses",
                )


def check_directory(directory: Path) -> None:
    """Raise :class:`OSError` naming ``directory`` when it exists but is not a directory."""
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"the baselines path {directory} exists but is not a directory")


def update_baseline_file(
    path: Path, fingerprint: dict[str, Any], entries: dict[str, dict[str, dict[str, Any]] | None]
) -> BaselineFile:
    """Record ``entries`` (test id -> metric -> entry) in ``path``, keeping every other test's entry.

    Each test's metrics are replaced as a whole (a metric a test no longer
    produces disappears); a test mapped to None is removed (its entries moved
    to a new id). Raises :class:`BaselineError`, writing nothing, when the
    existing file is malformed or an entry is invalid; the file is left as it
    is (not even re-rendered) when nothing in it changes. An entry of the file that
    the reader refuses is dropped (the file repaired) and named in the result's ``dropped``.
    """
    from pytest_gpuperf.baselines.schema import load_baseline_file

    check_entries(path, entries)
    check_directory(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    with directory_lock(path.parent):
        sweep_stale_temp_files(path.parent)
        dropped: list[str] = []
        current = load_baseline_file(path, cached=False, dropped=dropped)  # fresh, under the lock
        stored = dict(current.stored) if current is not None else {}
        changed = current is None or bool(dropped)
        for test_id, metrics in entries.items():
            if metrics is None:
                changed = stored.pop(test_id, None) is not None or changed
                continue
            new = {name: ordered_entry(entry) for name, entry in metrics.items()}
            old = {name: ordered_entry(entry) for name, entry in stored.get(test_id, {}).items()}
            if new != old:
                stored[test_id] = new
                changed = True
        result = BaselineFile(path=path, fingerprint=dict(fingerprint), tests=stored, stored=stored, dropped=dropped)
        if changed:
            atomic_write_text(path, render_baseline(result))
        elif current is not None:
            result.fingerprint = current.fingerprint
    return result
