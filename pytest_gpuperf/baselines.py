"""Baseline files: versioned YAML under ``baselines/``, one file per hardware fingerprint.

Layout of one file (keys are always written in this order, tests and metrics
sorted, so a PR diff shows only what changed)::

    schema_version: 1
    fingerprint: {backend: cuda, device_name: NVIDIA H200, arch: sm_90, ...}
    tests:
      perf_tests/test_seed.py::test_linear_fp16_forward_backward[cuda]:
        step.peak_memory: {value: 301989888, unit: B, better: lower, kind: memory}
        step.time:
          value: 0.00123
          unit: s
          better: lower
          kind: time
          samples: [0.00123, 0.00124, ...]

Reading uses ``yaml.safe_load`` only. Writing takes an exclusive ``flock`` on the
baselines directory, re-reads the file, replaces only the entries of the tests
that ran, writes a temporary file in the same directory and renames it over the
old one, so a crash never leaves half a file and concurrent pytest-xdist workers
never lose each other's entries. A file that cannot be parsed or has another
schema version is never overwritten.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
METRIC_FIELD_ORDER = ("value", "unit", "better", "kind", "samples", "normalized", "extra")
_SAMPLES_KEPT = 30


class BaselineError(Exception):
    """A baseline file is malformed; the message names the file, the line and the fix."""

    def __init__(self, path: Path | str, message: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        where = f"{self.path}:{line}" if line else str(self.path)
        super().__init__(
            f"{where}: {message}. The file was left untouched; fix it by hand or delete it and "
            f"re-record with `pytest --gpuperf --gpuperf-update`."
        )


@dataclass
class BaselineFile:
    """The parsed content of one baseline file."""

    path: Path
    fingerprint: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


def _line_of(text: str, keys: list[str]) -> int | None:
    """1-based line of the node reached by ``keys`` in ``text`` (best effort, for error messages)."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == key:
                line = key_node.start_mark.line + 1
                node = value_node
                break
        else:
            break
    return line


def parse_baseline_text(path: Path, text: str) -> BaselineFile:
    """Parse and validate the text of a baseline file; raise :class:`BaselineError` on any problem."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context_mark", None)
        if context is not None and mark is not None and context.line != mark.line:
            problem += f", {getattr(exc, 'context', 'started')} on line {context.line + 1}"
        raise BaselineError(path, f"not valid YAML ({problem})", line) from exc
    if data is None:
        raise BaselineError(path, "file is empty")
    if not isinstance(data, dict):
        raise BaselineError(path, f"top level must be a mapping, found {type(data).__name__}", 1)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BaselineError(
            path,
            f"schema_version is {version!r}, this pytest-gpuperf reads version {SCHEMA_VERSION}",
            _line_of(text, ["schema_version"]) or 1,
        )
    fingerprint = data.get("fingerprint")
    if not isinstance(fingerprint, dict):
        raise BaselineError(path, "'fingerprint' must be a mapping", _line_of(text, ["fingerprint"]))
    tests = data.get("tests") or {}
    if not isinstance(tests, dict):
        raise BaselineError(path, "'tests' must be a mapping of test id to metrics", _line_of(text, ["tests"]))
    for test_id, metrics in tests.items():
        if not isinstance(metrics, dict):
            raise BaselineError(
                path, f"test {test_id!r} must map metric names to entries", _line_of(text, ["tests", test_id])
            )
        for metric_name, entry in metrics.items():
            where = _line_of(text, ["tests", test_id, metric_name])
            if not isinstance(entry, dict) or "value" not in entry:
                raise BaselineError(path, f"metric {metric_name!r} of {test_id!r} needs a 'value'", where)
            value = entry["value"]
            if not isinstance(value, (int, float, str)) or isinstance(value, bool):
                raise BaselineError(
                    path, f"metric {metric_name!r} of {test_id!r}: value must be a number or a word", where
                )
            for list_key in ("samples", "normalized"):
                samples = entry.get(list_key, [])
                if not isinstance(samples, list) or not all(
                    isinstance(s, (int, float)) and not isinstance(s, bool) for s in samples
                ):
                    raise BaselineError(
                        path, f"metric {metric_name!r} of {test_id!r}: {list_key} must be a list of numbers", where
                    )
    return BaselineFile(path=path, fingerprint=fingerprint, tests=tests)


def load_baseline_file(path: Path) -> BaselineFile | None:
    """Load ``path``; None when it does not exist; :class:`BaselineError` when it is malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(path, f"cannot be read ({exc})") from exc
    return parse_baseline_text(path, text)


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


def _ordered_entry(entry: dict[str, Any]) -> dict[str, Any]:
    ordered: dict[str, Any] = {}
    for key in METRIC_FIELD_ORDER:
        value = _plain(entry.get(key))
        if value not in (None, [], {}):
            if isinstance(value, list):
                value = [_round(v) for v in value[:_SAMPLES_KEPT]]
            elif isinstance(value, dict):
                value = {k: _round(v) for k, v in sorted(value.items())}
            else:
                value = _round(value)
            ordered[key] = value
    for key in sorted(set(entry) - set(METRIC_FIELD_ORDER)):
        ordered[key] = _plain(entry[key])
    return ordered


def render_baseline(baseline: BaselineFile) -> str:
    """Serialise a baseline file with a stable key order and flow-style sample lists."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
        flow = all(isinstance(v, (int, float)) for v in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(list, _represent_list)
    document = {
        "schema_version": SCHEMA_VERSION,
        "fingerprint": {k: _plain(baseline.fingerprint[k]) for k in sorted(baseline.fingerprint)},
        "tests": {
            test_id: {name: _ordered_entry(baseline.tests[test_id][name]) for name in sorted(baseline.tests[test_id])}
            for test_id in sorted(baseline.tests)
        },
    }
    header = (
        "# pytest-gpuperf baselines for one hardware fingerprint. Written by `pytest --gpuperf --gpuperf-update`;\n"
        "# review changes in the PR diff. Units: B = bytes, s = seconds per step.\n"
    )
    return header + yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``directory`` (serialises writers from xdist workers and processes)."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; writes are still atomic renames
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half-written)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def update_baseline_file(
    path: Path, fingerprint: dict[str, Any], entries: dict[str, dict[str, dict[str, Any]]]
) -> BaselineFile:
    """Record ``entries`` (test id -> metric -> entry) in ``path``, keeping every other test's entry.

    Each test's metrics are replaced as a whole (a metric a test no longer
    produces disappears). Raises :class:`BaselineError`, writing nothing, when
    the existing file is malformed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _directory_lock(path.parent):
        current = load_baseline_file(path) or BaselineFile(path=path)
        current.fingerprint = dict(fingerprint)
        for test_id, metrics in entries.items():
            current.tests[test_id] = {name: dict(entry) for name, entry in metrics.items()}
        atomic_write_text(path, render_baseline(current))
    return current
