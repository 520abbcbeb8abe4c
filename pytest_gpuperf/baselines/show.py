"""``gpuperf show NODEID``: one test's stored baseline entries, each field with its value and its meaning.

Reads every baseline file of a folder (or those whose name matches ``--device``) and prints the test's entries
as they are stored, one block per file: the file's hardware, then each metric's value and every field beside it;
last, what each field shown means (:data:`~pytest_gpuperf.baselines.fields.ENTRY_FIELDS`). A malformed file is
skipped with its error. Exit status: 0 when shown; 2 when the folder is missing or no file holds the test (the
closest stored ids are listed).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from pytest_gpuperf.baselines.fields import ENTRY_FIELDS
from pytest_gpuperf.baselines.schema import BaselineError, BaselineFile, load_baseline_file
from pytest_gpuperf.units import format_seconds, format_value

MEANINGS = {row.name: row.meaning for row in ENTRY_FIELDS}
#: Fields that are fractions, shown as percentages.
PERCENT_FIELDS = frozenset({"process_spread", "min_detectable_change", "noise_bound", "calibration_spread"})
#: The fingerprint fields that name the hardware, in the order shown.
HARDWARE = ("backend", "device_name", "arch", "memory_gib", "world_size", "torch")


def show_parser() -> argparse.ArgumentParser:
    """The options of ``gpuperf show``."""
    parser = argparse.ArgumentParser(
        prog="gpuperf show",
        description="One test's stored baseline entries, in every baseline file, with what each field means.",
    )
    parser.add_argument("node_id", metavar="NODEID", help="the test's pytest id, e.g. 'tests/test_x.py::test_y[cpu]'")
    parser.add_argument("--baselines", default="baselines", metavar="DIR", help="baseline folder (default: baselines)")
    parser.add_argument(
        "--device", metavar="PATTERN", help="only files whose name matches (a glob with *?[, else a substring)"
    )
    return parser


def _chosen(path: Path, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(path.name, pattern) or fnmatch.fnmatchcase(path.stem, pattern)
    return pattern in path.name


def field_text(name: str, value: Any, unit: str) -> str:
    """One stored field's value, formatted for reading (units, percentages, sample ranges)."""
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "samples" and isinstance(value, list):
        numbers = [v for v in value if isinstance(v, (int, float))]
        if not numbers:
            return f"{len(value)} samples"
        return f"{len(value)} samples, {format_value(min(numbers), unit)} .. {format_value(max(numbers), unit)}"
    if name in PERCENT_FIELDS and numeric:
        return f"{value * 100:.1f}%"
    if name.endswith("_mhz") and numeric:
        return f"{value:g} MHz"
    if name in ("calibration", "eager_time") and numeric:
        return format_seconds(float(value))
    if name == "value" and (numeric or isinstance(value, str)):
        return format_value(value, unit)
    return repr(value) if isinstance(value, str) and not value else str(value)


#: Fields the metric's header line shows; the others get a line each.
HEADER_FIELDS = ("value", "unit", "kind", "better")


def entry_lines(metric: str, entry: dict[str, Any]) -> list[str]:
    """The lines of one metric entry: its value, kind and direction, then each other field and its value."""
    unit = str(entry.get("unit", ""))
    better = entry.get("better")
    head = f"  {metric} = {field_text('value', entry.get('value'), unit)}  (kind {entry.get('kind', '?')}"
    head += ", any change fails)" if better == "equal" else f", {better} is better)" if better else ")"
    lines = [head]
    for name, value in entry.items():
        if name not in HEADER_FIELDS:
            lines.append(f"    {name:<22} {field_text(name, value, unit)}")
    return lines


def legend(names: list[str]) -> list[str]:
    """What each field shown means (from :data:`~pytest_gpuperf.baselines.fields.ENTRY_FIELDS`)."""
    return [f"  {name:<22} {MEANINGS.get(name) or '(not read by the gate)'}" for name in names]


def file_header(loaded: BaselineFile) -> str:
    """``baselines/x.yaml: cpu, AMD EPYC, x86_64, 24 GiB, world size 1, torch 2.13.0``."""
    shown = {"memory_gib": "{} GiB", "world_size": "world size {}", "torch": "torch {}"}
    found = loaded.fingerprint
    parts = [shown.get(key, "{}").format(found[key]) for key in HARDWARE if key in found]
    return f"{loaded.path}: {', '.join(parts)}" if parts else str(loaded.path)


def show(argv: list[str]) -> int:
    """Run ``gpuperf show`` with ``argv``; its exit status."""
    args = show_parser().parse_args(argv)
    folder = Path(args.baselines)
    if not folder.is_dir():
        print(f"gpuperf show: --baselines {folder} is not a folder", file=sys.stderr)
        return 2
    files = [p for p in sorted(folder.glob("*.yaml")) if _chosen(p, args.device)]
    if not files:
        print(f"gpuperf show: no baseline file in {folder} matches --device {args.device}", file=sys.stderr)
        return 2
    known: set[str] = set()
    blocks: list[list[str]] = []
    fields: dict[str, None] = dict.fromkeys(HEADER_FIELDS)
    for path in files:
        try:
            loaded = load_baseline_file(path, cached=False)
        except BaselineError as exc:
            print(f"gpuperf show: skipped {exc}", file=sys.stderr)
            continue
        metrics = loaded.stored.get(args.node_id) if loaded is not None else None
        known.update(loaded.stored if loaded is not None else ())
        if loaded is not None and metrics:
            lines = [file_header(loaded)]
            for metric, entry in sorted(metrics.items()):
                lines += entry_lines(metric, entry)
                fields.update(dict.fromkeys(entry))
            blocks.append(lines)
    if not blocks:
        print(_unknown(args.node_id, known, files), file=sys.stderr)
        return 2
    blocks.append(["what the fields mean:", *legend(list(fields))])
    print("\n\n".join("\n".join(lines) for lines in blocks))
    return 0


def closest_ids(node_id: str, known: set[str], count: int = 5) -> list[str]:
    """The stored test ids nearest ``node_id``: those that contain it (a test without its parameters), else the
    most similar."""
    containing = sorted(k for k in known if node_id in k)
    return containing[:count] or get_close_matches(node_id, sorted(known), n=count, cutoff=0.5)


def _unknown(node_id: str, known: set[str], files: list[Path]) -> str:
    where = f"{len(files)} baseline file(s)"
    close = closest_ids(node_id, known)
    if not close:
        return f"gpuperf show: no entry for {node_id} in {where}"
    listed = "\n".join(f"  {k}" for k in close)
    return f"gpuperf show: no entry for {node_id} in {where}; the closest stored test ids:\n{listed}"
