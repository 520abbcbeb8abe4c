"""The ``--gpuperf-json`` report: versioned, documented in ``docs/report-format.md``.

The top level follows pytest-benchmark's JSON (``machine_info``, ``commit_info``,
``benchmarks``, ``datetime``, ``version``), so ``pytest-benchmark compare report.json``
reads it: every timed step is one entry of ``benchmarks`` whose ``stats`` are computed
by ``pytest_benchmark.stats.Stats`` from the step's per-call time samples. Everything
pytest-gpuperf knows beyond that (verdicts, baselines, fingerprints, baseline changes
against a git ref, artifacts) lives under the ``gpuperf`` key.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_gpuperf.reporting.records import TestRecord, device_key, split_metric
from pytest_gpuperf.results import STATUS_ORDER

FORMAT_NAME = "pytest-gpuperf-report"
FORMAT_VERSION = 1


def machine_info(fingerprints: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` keys from :mod:`platform`, plus the devices' fingerprints."""
    return {
        "node": platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": {"count": os.cpu_count(), "arch": platform.machine()},
        "gpuperf_devices": list(fingerprints),
    }


def commit_info(root: Path) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info`` (id, time, dirty, project, branch) of the repository at ``root``."""
    from pytest_benchmark.utils import get_commit_info

    previous = Path.cwd()
    try:
        os.chdir(root)
        return dict(get_commit_info())
    except OSError as exc:
        return {"id": "unknown", "error": str(exc)}
    finally:
        os.chdir(previous)


def _stats(samples: list[float], iterations: int) -> dict[str, Any]:
    """pytest-benchmark's stats dict for per-call times in seconds."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for sample in samples:
        stats.update(sample)
    return {**stats.as_dict(), "iterations": iterations}


def _param(nodeid: str) -> str | None:
    """The parametrization id of a test id (``test_x[cuda]`` -> ``cuda``)."""
    if nodeid.endswith("]") and "[" in nodeid:
        return nodeid[nodeid.index("[") + 1 : -1]
    return None


def benchmark_entries(record: TestRecord) -> list[dict[str, Any]]:
    """pytest-benchmark ``benchmarks`` entries of one test: one per timed step with samples."""
    from pytest_gpuperf.backends.fingerprint import describe

    verdicts = record.verdicts
    by_step: dict[str, list[dict[str, Any]]] = {}
    for verdict in verdicts:
        by_step.setdefault(split_metric(verdict["metric"])[0], []).append(verdict)
    entries = []
    for verdict in verdicts:
        step, metric = split_metric(verdict["metric"])
        samples = verdict.get("sample_values") or []
        if metric != "time" or verdict.get("kind") != "time" or not samples:
            continue
        suffix = "" if step == "step" else f"::{step}"
        name = record.nodeid.rpartition("::")[2] + suffix
        judged = [v for v in by_step[step] if v["status"] not in ("info",)]
        extra = {
            "gpuperf_status": verdict["status"] if verdict["status"] != "info" else _worst(judged),
            "gpuperf_test_status": record.status,
            "outcome": record.outcome,
        }
        for other in by_step[step]:
            if isinstance(other.get("value"), (int, float, str)):
                extra[other["metric"]] = other["value"]
        entries.append(
            {
                "group": describe(record.fingerprint),
                "name": name,
                "fullname": record.nodeid + suffix,
                "params": record.data.get("params"),
                "param": _param(record.nodeid),
                "extra_info": extra,
                "options": {"timer": "gpuperf device timer", "disable_gc": False, "warmup": True},
                "stats": _stats(samples, int(verdict.get("extra", {}).get("iters_per_sample", 1) or 1)),
            }
        )
    return entries


def _worst(verdicts: list[dict[str, Any]]) -> str:
    from pytest_gpuperf.results import worst_status

    return worst_status(v["status"] for v in verdicts)


def relative_path(path: Any, root: Path | None) -> Any:
    """``path`` relative to ``root`` (POSIX separators) when it lies below it, else as it is."""
    if not path or root is None:
        return path
    try:
        return Path(str(path)).resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return path


def devices(records: Iterable[TestRecord], root: Path | None = None) -> list[dict[str, Any]]:
    """One entry per device (fingerprint) the tests ran on, with its baseline file (relative to ``root`` when below
    it) and software changes."""
    seen: dict[str, dict[str, Any]] = {}
    for record in records:
        fingerprint = record.fingerprint
        if not fingerprint:
            continue
        key = device_key(fingerprint)
        entry = seen.setdefault(
            key,
            {
                "key": key,
                "fingerprint": fingerprint,
                "baseline_file": relative_path(record.data.get("baseline_file"), root),
                "software_changes": list(record.data.get("software_changes") or []),
                "tests": 0,
            },
        )
        entry["tests"] += 1
    return list(seen.values())


def summary(records: Iterable[TestRecord]) -> dict[str, Any]:
    """How many tests have each overall status, plus ``tests`` and ``failed``; ``metrics``: how many metrics have
    each status (what the terminal's summary line counts)."""
    records = list(records)
    counts: dict[str, Any] = {status: 0 for status in STATUS_ORDER}
    metrics = {status: 0 for status in STATUS_ORDER}
    for record in records:
        counts[record.status] += 1
        for verdict in record.verdicts:
            status = str(verdict.get("status"))
            metrics[status] = metrics.get(status, 0) + 1
    counts["tests"] = len(records)
    counts["failed"] = sum(1 for r in records if r.outcome == "failed")
    counts["metrics"] = metrics
    return counts


def build_report(
    records: list[TestRecord],
    root: Path,
    baseline_ref: dict[str, Any] | None = None,
    artifacts: dict[str, Any] | None = None,
    update: bool = False,
) -> dict[str, Any]:
    """The whole JSON document (see ``docs/report-format.md``)."""
    from pytest_gpuperf import __version__

    device_list = devices(records, root)
    benchmarks = [entry for record in records for entry in benchmark_entries(record)]
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "version": __version__,
        "datetime": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "machine_info": machine_info(d["fingerprint"] for d in device_list),
        "commit_info": commit_info(root),
        "benchmarks": benchmarks,
        "gpuperf": {
            "mode": "update" if update else "compare",
            "summary": summary(records),
            "devices": device_list,
            "tests": [
                {
                    "nodeid": r.nodeid,
                    "outcome": r.outcome,
                    "duration": r.duration,
                    "status": r.status,
                    "device": device_key(r.fingerprint) if r.fingerprint else None,
                    "metrics": r.verdicts,
                }
                for r in records
            ],
            "baseline_ref": baseline_ref,
            "artifacts": artifacts or {},
        },
    }


def json_text(document: dict[str, Any]) -> str:
    """``document`` as the report's JSON text (non-finite floats as null)."""
    return json.dumps(_finite(document), indent=2, sort_keys=False) + "\n"


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` atomically (parent folders created; non-finite floats as null)."""
    from pytest_gpuperf.reporting.files import write_report

    write_report(path, json_text(document))


def _finite(value: Any) -> Any:
    """Replace NaN/inf (not valid JSON) with None, recursively."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
