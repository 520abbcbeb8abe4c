"""A metric's history: its values over the commits that changed its baseline, and over saved reports.

Every accepted ``--gpuperf-update`` is a commit touching ``baselines/*.yaml``; :func:`baseline_series` walks those
commits with git and takes a point wherever an entry was added or its value changed (an update that left an entry
as it was adds no point, so a metric's series holds its accepted values, each once). :func:`report_series` adds the
values of ``--gpuperf-json`` reports (CI runs that were judged and never accepted) by their commit.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: Bytes of one baseline file at one commit read at most (a larger file is skipped with a note).
MAX_FILE_BYTES = 16 * 2**20


class HistoryError(Exception):
    """The history cannot be read (no git, not a repository, an unknown revision); the message says which."""


@dataclass(frozen=True)
class Point:
    """One value of a metric: at a commit, from a baseline entry or a saved report."""

    commit: str
    date: str
    value: float
    subject: str = ""
    #: The spread between recording processes the entry stored (a fraction), when it did.
    spread: float | None = None
    source: str = "baseline"


@dataclass
class Series:
    """The points of one metric of one test on one device (a baseline file's stem), oldest first."""

    device: str
    test: str
    metric: str
    unit: str = ""
    better: str = "lower"
    kind: str = ""
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        """(device, test, metric): what identifies the series."""
        return (self.device, self.test, self.metric)


def _git(root: Path, *args: str) -> str:
    """Run git in ``root``; its stdout, or :class:`HistoryError` with git's own words."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise HistoryError("gpuperf history needs the `git` command, which is not on PATH") from exc
    if done.returncode != 0:
        raise HistoryError(f"git {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def repository_of(directory: Path) -> tuple[Path, str]:
    """The repository root holding ``directory`` and the directory's path in it (git's spelling)."""
    start = directory if directory.is_dir() else directory.parent
    if not start.exists():
        raise HistoryError(f"the baselines folder {directory} does not exist")
    root = Path(_git(start, "rev-parse", "--show-toplevel").strip())
    try:
        relative = directory.resolve().relative_to(root.resolve())
    except ValueError as exc:
        raise HistoryError(f"{directory} is not inside the repository {root}") from exc
    return root, relative.as_posix().strip("/") or "."


@dataclass(frozen=True)
class Commit:
    """A commit that touched the baselines: its sha, committer date, subject and the YAML files it changed."""

    sha: str
    date: str
    subject: str
    files: tuple[str, ...]


def baseline_commits(root: Path, folder: str, since: str | None = None) -> list[Commit]:
    """The commits (oldest first) that changed a YAML file under ``folder``, after ``since`` when given."""
    revisions = [f"{since}..HEAD"] if since else ["HEAD"]
    out = _git(root, "log", "--reverse", "--format=%x00%H%x09%cI%x09%s", "--name-only", *revisions, "--", folder)
    commits = []
    for record in out.split("\x00")[1:]:
        head, _, names = record.partition("\n")
        sha, date, subject = [*head.split("\t", 2), "", ""][:3]
        files = tuple(n for n in names.split() if n.endswith((".yaml", ".yml")))
        commits.append(Commit(sha, date, subject, files))
    return commits


def _read_at(root: Path, sha: str, path: str) -> dict[str, Any] | None:
    """The baseline file ``path`` at ``sha`` parsed (None when it does not exist there or cannot be read)."""
    from pytest_gpuperf.baselines.schema import BaselineError, parse_baseline_text

    listed = subprocess.run(
        ["git", "cat-file", "-s", f"{sha}:{path}"], cwd=root, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0 or int(listed.stdout.strip() or 0) > MAX_FILE_BYTES:
        return None
    text = _git(root, "show", f"{sha}:{path}")
    try:
        return parse_baseline_text(Path(path), text).stored
    except BaselineError:
        return None


def _numeric(value: Any) -> float | None:
    """``value`` as a finite float, or None for a category, a bool or anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def baseline_series(directory: Path, since: str | None = None) -> list[Series]:
    """Per device, test and metric: the values the baselines under ``directory`` held, commit by commit.

    With ``since``, the files as they were at that revision give each series its first point (the reference of
    its drift); without it the history starts at the first commit that wrote a baseline.
    """
    root, folder = repository_of(directory)
    found: dict[tuple[str, str, str], Series] = {}
    state: dict[str, dict[str, dict[str, Any]]] = {}
    if since:
        sha = _git(root, "rev-parse", "--verify", f"{since}^{{commit}}").strip()
        date, subject = _git(root, "log", "-1", "--format=%cI%x09%s", sha).strip().split("\t", 1)
        listed = _git(root, "ls-tree", "--name-only", sha, f"{folder}/").split()
        start = Commit(sha, date, subject, tuple(n for n in listed if n.endswith((".yaml", ".yml"))))
        _take(root, start, state, found)
    for commit in baseline_commits(root, folder, since):
        _take(root, commit, state, found)
    return [series for series in found.values() if series.points]


def _take(
    root: Path, commit: Commit, state: dict[str, dict[str, dict[str, Any]]], found: dict[tuple[str, str, str], Series]
) -> None:
    """Add a point for every entry ``commit`` added or changed in its files; remember the files' new state."""
    for path in commit.files:
        tests = _read_at(root, commit.sha, path)
        if tests is None:
            state.pop(path, None)
            continue
        before = state.get(path, {})
        device = Path(path).stem
        for test, metrics in tests.items():
            for metric, entry in metrics.items():
                value = _numeric(entry.get("value"))
                old = before.get(test, {}).get(metric)
                if value is None or (old is not None and _numeric(old.get("value")) == value):
                    continue
                series = found.setdefault(
                    (device, test, metric),
                    Series(device, test, metric, str(entry.get("unit", "")), str(entry.get("better", "lower"))),
                )
                series.kind = str(entry.get("kind", series.kind))
                spread = _numeric(entry.get("process_spread"))
                series.points.append(Point(commit.sha, commit.date, value, commit.subject, spread))
        state[path] = tests


def _when(text: str) -> datetime:
    """An ISO date (a ``Z`` suffix allowed) as an aware datetime; unreadable dates sort first."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return datetime.min.replace(tzinfo=timezone.utc)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def report_points(paths: Iterable[Path]) -> tuple[dict[tuple[str, str, str], list[Point]], list[str]]:
    """Points from ``--gpuperf-json`` reports by (device, test, metric), and a note per file that was skipped."""
    points: dict[tuple[str, str, str], list[Point]] = {}
    skipped = []
    for path in sorted(paths):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if not isinstance(data, dict) or data.get("format") != "pytest-gpuperf-report":
            skipped.append(f"{path}: not a --gpuperf-json report")
            continue
        if (data.get("gpuperf") or {}).get("mode") == "update":
            continue  # an update's values are in the baselines' history already
        commit = data.get("commit_info") or {}
        sha = str(commit.get("id") or path.stem)
        date = str(commit.get("time") or data.get("datetime") or "")
        for test in (data.get("gpuperf") or {}).get("tests") or []:
            for metric in test.get("metrics") or []:
                value = _numeric(metric.get("value"))
                if value is None:
                    continue
                key = (str(test.get("device", "")), str(test.get("nodeid", "")), str(metric.get("metric", "")))
                points.setdefault(key, []).append(Point(sha, date, value, path.name, None, "report"))
    return points, skipped


def merged(series: list[Series], reported: dict[tuple[str, str, str], list[Point]]) -> list[Series]:
    """``series`` with the reports' points added (new series where no baseline had the metric), by date."""
    by_key = {s.key: s for s in series}
    for key, points in reported.items():
        target = by_key.setdefault(key, Series(*key))
        target.points.extend(points)
    for target in by_key.values():
        target.points.sort(key=lambda point: _when(point.date))
    return list(by_key.values())
