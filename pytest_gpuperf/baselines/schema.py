"""Reading and validating one baseline file (schema version 1).

Layout (keys always written in this order, tests and metrics sorted, so a PR diff
shows only what changed)::

    schema_version: 1
    fingerprint: {backend: cuda, device_name: NVIDIA H200, arch: sm_90, ...}
    tests:
      perf_tests/test_seed.py::test_linear_fp16_forward_backward[cuda]:
        step.peak_memory: {value: 301989888, unit: B, better: lower, kind: memory}
        step.time: {value: 0.00123, unit: s, better: lower, kind: time, samples: [0.00123, ...]}
        step.throughput: {value: 832000.0, unit: samples/s, better: higher, kind: throughput}

A throughput entry stores no samples of its own when its ``<step>.time`` sibling
has them: they are the same measurements (``items / time``), derived on reading.
The drift probe's fields of older files (``normalized`` samples, ``reference``) are
ignored on reading and not written again.

Reading uses the safe loader only, in one pass: the document is composed once,
line numbers come from that node tree, and the sample lists are checked for
size before any number is built. Every number that reaches the gate is checked
(finite, not negative, a time above zero): a NaN or a negative peak would
switch the comparison off. Errors name the file, the line, the test and the metric.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.baselines.fields import MAX_SAMPLES

SCHEMA_VERSION = 1
#: Largest baseline file read (a 1,000-test file is about 1 MB).
MAX_FILE_BYTES = 32 * 1024 * 1024
#: Fields of the drift probe, which is gone: read and dropped.
RETIRED_FIELDS = frozenset({"normalized", "reference"})
RERECORD_HINT = "fix it by hand or delete it and re-record with `pytest --gpuperf --gpuperf-update`"


class BaselineError(Exception):
    """A baseline file is malformed; the message names the file, the line and the fix."""

    def __init__(self, path: Path | str, message: str, line: int | None = None, hint: str = RERECORD_HINT) -> None:
        self.path = Path(path)
        self.line = line
        where = f"{self.path}:{line}" if line else str(self.path)
        super().__init__(f"{where}: {message}. The file was left untouched; {hint}.")


@dataclass
class BaselineFile:
    """The parsed content of one baseline file.

    ``tests`` is what judging reads (throughput samples derived from their time
    sibling); ``stored`` is the entries as written on disk, which an update keeps
    byte for byte. A file built by hand (``stored`` left empty) stores ``tests``.
    """

    path: Path
    fingerprint: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    stored: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: The errors of entries left out when the file was read for repair (``--gpuperf-update``).
    dropped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.stored:
            self.stored = self.tests


def entry_problem(entry: Any) -> str | None:
    """What is wrong with one metric entry (None when it is valid); shared by reading and writing.

    Every field a verdict reads is checked by its row of :data:`~pytest_gpuperf.baselines.fields.ENTRY_FIELDS`.
    """
    from pytest_gpuperf.baselines.fields import entry_problem as check_fields

    return check_fields(entry)


def _yaml_error(path: Path, exc: Exception) -> BaselineError:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context_mark", None)
    if context is not None and mark is not None and context.line != mark.line:
        problem += f", {getattr(exc, 'context', 'started')} on line {context.line + 1}"
    return BaselineError(path, f"not valid YAML ({problem})", line)


def _mapping_items(node: Any) -> list[tuple[Any, Any]]:
    from pytest_gpuperf.baselines.strict_yaml import yaml_module

    return node.value if isinstance(node, yaml_module().MappingNode) else []


def _check_sample_counts(path: Path, root: Any) -> dict[tuple[str, ...], int]:
    """Line of each top-level key, test and metric; refuses an oversized sample list before it is built."""
    from pytest_gpuperf.baselines.strict_yaml import yaml_module

    yaml = yaml_module()  # the classes the parser built the nodes of

    lines: dict[tuple[str, ...], int] = {}
    for key, value in _mapping_items(root):
        lines[(str(key.value),)] = key.start_mark.line + 1
        if key.value != "tests":
            continue
        for ncu_test_key, metrics in _mapping_items(value):
            lines[("tests", str(ncu_test_key.value))] = ncu_test_key.start_mark.line + 1
            for metric_key, entry in _mapping_items(metrics):
                line = metric_key.start_mark.line + 1
                lines[("tests", str(ncu_test_key.value), str(metric_key.value))] = line
                for field_key, field_value in _mapping_items(entry):
                    if isinstance(field_value, yaml.SequenceNode) and len(field_value.value) > MAX_SAMPLES:
                        raise BaselineError(
                            path,
                            f"metric {metric_key.value!r} of {ncu_test_key.value!r}: {field_key.value} holds "
                            f"{len(field_value.value)} values, more than the {MAX_SAMPLES} read per metric "
                            "(a baseline keeps ~30)",
                            field_key.start_mark.line + 1,
                        )
    return lines


def _compose(path: Path, text: str) -> tuple[Any, dict[tuple[str, ...], int]]:
    """Compose once (libyaml when present) with the strict checks, check sizes on the node tree, build the data."""
    from pytest_gpuperf.baselines.strict_yaml import StrictYamlError, compose_strict, yaml_module

    yaml = yaml_module()  # the classes the parser raises (not always ``import yaml``: see yaml_module)

    collecting = gc.isenabled()
    gc.disable()  # a node tree of ~10^5 young objects would trigger full collections over and over (3x slower)
    loader = None
    try:
        node, loader = compose_strict(text)
        if node is None:
            return None, {}
        lines = _check_sample_counts(path, node)
        return loader.construct_document(node), lines
    except StrictYamlError as exc:
        raise BaselineError(path, str(exc), exc.line) from exc
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from exc
    except (ValueError, OverflowError, RecursionError) as exc:  # a number Python cannot build, nesting too deep
        raise BaselineError(path, f"not valid YAML ({type(exc).__name__}: {exc})") from exc
    finally:
        if loader is not None:
            loader.dispose()
        if collecting:
            gc.enable()


def _check_version(path: Path, version: Any, line: int) -> None:
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise BaselineError(
            path,
            f"schema_version {version} was written by a newer pytest-gpuperf; this one reads version {SCHEMA_VERSION}",
            line,
            hint="upgrade pytest-gpuperf (`pip install -U pytest-gpuperf`) to read it",
        )
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise BaselineError(
            path, f"schema_version is {version!r}, this pytest-gpuperf reads version {SCHEMA_VERSION}", line
        )


def derived_samples(metrics: dict[str, dict[str, Any]], name: str) -> list[float] | None:
    """Samples of throughput metric ``name`` derived from its ``<step>.time`` sibling (None if not derivable)."""
    entry = metrics[name]
    sibling = metrics.get(name.rpartition(".")[0] + ".time")
    if entry.get("kind") != "throughput" or not sibling or sibling.get("kind") != "time":
        return None
    times = sibling.get("samples") or []
    if not times:
        return None
    items = float(entry["value"]) * float(sibling["value"])
    return sorted(items / t for t in times)


def _expand(stored: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The entries judging reads: a throughput entry without samples gets them from its time sibling."""
    expanded: dict[str, dict[str, dict[str, Any]]] = {}
    for test_id, metrics in stored.items():
        out: dict[str, dict[str, Any]] = {}
        for name, entry in metrics.items():
            if entry.get("kind") == "throughput" and not entry.get("samples"):
                samples = derived_samples(metrics, name)
                if samples:
                    entry = {**entry, "samples": samples}
            out[name] = entry
        expanded[test_id] = out
    return expanded


def parse_baseline_text(path: Path, text: str, dropped: list[str] | None = None) -> BaselineFile:
    """Parse and validate the text of a baseline file; raise :class:`BaselineError` on any problem.

    With a ``dropped`` list (the writer repairing a file under ``--gpuperf-update``) an entry the reader refuses
    (a bad test id, metric name or field) is left out and its error appended, instead of refusing the file;
    a file that is not a baseline at all (YAML, schema version, fingerprint) is still refused.
    """
    if len(text) > MAX_FILE_BYTES:
        raise _too_large(path)
    data, lines = _compose(path, text)
    if data is None:
        raise BaselineError(path, "file is empty")
    if not isinstance(data, dict):
        raise BaselineError(path, f"top level must be a mapping, found {type(data).__name__}", 1)
    _check_version(path, data.get("schema_version"), lines.get(("schema_version",), 1))
    fingerprint = data.get("fingerprint")
    if not isinstance(fingerprint, dict):
        raise BaselineError(path, "'fingerprint' must be a mapping", lines.get(("fingerprint",)))
    tests = data.get("tests") or {}
    if not isinstance(tests, dict):
        raise BaselineError(path, "'tests' must be a mapping of test id to metrics", lines.get(("tests",)))
    stored: dict[str, dict[str, dict[str, Any]]] = {}
    for test_id, metrics in tests.items():
        try:
            entries = _test_entries(path, test_id, metrics, lines)
        except BaselineError as exc:
            if dropped is None:
                raise
            dropped.append(str(exc).partition(". The file was left untouched")[0])
            continue
        stored[str(test_id)] = entries
    return BaselineFile(
        path=path, fingerprint=fingerprint, tests=_expand(stored), stored=stored, dropped=list(dropped or [])
    )


def _test_entries(
    path: Path, test_id: Any, metrics: Any, lines: dict[tuple[str, ...], int]
) -> dict[str, dict[str, Any]]:
    """One test's checked entries (retired fields dropped); :class:`BaselineError` naming the line."""
    from pytest_gpuperf.validate import MAX_TEST_ID, name_problem

    problem = name_problem(test_id, "test id", MAX_TEST_ID)
    if problem:
        raise BaselineError(path, problem, lines.get(("tests", str(test_id))))
    if not isinstance(metrics, dict):
        raise BaselineError(
            path, f"test {test_id!r} must map metric names to entries", lines.get(("tests", str(test_id)))
        )
    entries = {}
    for metric_name, entry in metrics.items():
        problem = name_problem(metric_name) or entry_problem(entry)
        if problem:
            where = lines.get(("tests", str(test_id), str(metric_name)))
            raise BaselineError(path, f"metric {metric_name!r} of {test_id!r}: {problem}", where)
        entries[str(metric_name)] = {k: v for k, v in entry.items() if k not in RETIRED_FIELDS}
    return entries


_CACHE: OrderedDict[tuple[Any, ...], BaselineFile] = OrderedDict()
#: Baseline files kept parsed per process (a session reads each once; tests, summary and diff share it).
CACHE_SIZE = 64


def _too_large(path: Path) -> BaselineError:
    cap = f"{MAX_FILE_BYTES // 2**20} MiB" if MAX_FILE_BYTES >= 2**20 else f"{MAX_FILE_BYTES} bytes"
    return BaselineError(path, f"holds more than the {cap} read for a baseline (only that much was read)")


def load_baseline_file(path: Path, cached: bool = True, dropped: list[str] | None = None) -> BaselineFile | None:
    """Load ``path``; None when it does not exist; :class:`BaselineError` when it is malformed.

    Only a regular file is read (a FIFO or a device behind a symlink is refused, never waited on), and at most
    :data:`MAX_FILE_BYTES` + 1 bytes of it. With ``cached`` a file whose path, inode, size and times are
    unchanged is parsed once per process and the same (read-only) :class:`BaselineFile` is returned; a writer
    re-reading under its lock passes ``cached=False``. ``dropped``: see :func:`parse_baseline_text` (never cached).
    """
    from pytest_gpuperf.baselines.strict_yaml import NotARegularFile, TooLarge, read_regular_file

    try:
        raw, info = read_regular_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise BaselineError(path, "is a directory, not a baseline file") from exc
    except NotARegularFile as exc:
        raise BaselineError(path, f"{exc}; a baseline must be a regular file") from exc
    except TooLarge as exc:
        raise _too_large(path) from exc
    except OSError as exc:
        raise BaselineError(path, f"cannot be read ({exc})") from exc
    key = (str(Path(path).absolute()), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if dropped is not None:
        cached = False
    if cached and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(path, f"cannot be read ({exc})") from exc
    loaded = parse_baseline_text(path, text, dropped)
    if dropped:
        return loaded
    _CACHE[key] = loaded
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return loaded
