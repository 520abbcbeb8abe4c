"""``--gpuperf-baseline-ref REF``: judge against the baselines of a git ref, and list what the PR changes.

A PR that edits ``baselines/`` must not quietly loosen the gate it is judged by. With
``--gpuperf-baseline-ref origin/main`` every baseline file is read with
``git show REF:path`` instead of from the working tree, and the report lists every
entry the working tree adds, removes or changes against that ref, marking the changes
that loosen the gate (a slower time baseline, a lower throughput baseline, a removed
test or metric).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile


class GitRefError(Exception):
    """The ref cannot be resolved or read; the message names the ref, the folder and the fix."""


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise GitRefError("--gpuperf-baseline-ref needs the `git` command, which is not on PATH") from exc


@dataclass(frozen=True)
class GitRef:
    """A resolved git ref of the repository that holds the baselines."""

    ref: str
    commit: str
    repo_root: Path

    @classmethod
    def resolve(cls, ref: str, directory: Path) -> GitRef:
        """Resolve ``ref`` in the repository containing ``directory`` (which need not exist yet)."""
        start = directory
        while not start.exists() and start != start.parent:
            start = start.parent
        top = _git(start, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            raise GitRefError(
                f"--gpuperf-baseline-ref {ref}: the baselines folder {directory} is not inside a git repository "
                f"({top.stderr.strip()}); drop the option or keep baselines/ under git"
            )
        root = Path(top.stdout.strip()).resolve()
        sha = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if sha.returncode != 0:
            raise GitRefError(
                f"--gpuperf-baseline-ref {ref}: no such commit in {root}; fetch it first "
                f"(for example `git fetch origin main` and pass origin/main; in GitHub Actions "
                f"check out with fetch-depth: 0)"
            )
        return cls(ref=ref, commit=sha.stdout.strip(), repo_root=root)

    def relative(self, path: Path) -> str:
        """``path`` relative to the repository root, with forward slashes (git's spelling)."""
        try:
            return path.resolve().relative_to(self.repo_root).as_posix()
        except ValueError:
            raise GitRefError(
                f"--gpuperf-baseline-ref {self.ref}: {path} is outside the repository {self.repo_root}"
            ) from None

    def read(self, path: Path) -> str | None:
        """The text of ``path`` at this ref; None when the ref has no such file."""
        rel = self.relative(path)
        exists = _git(self.repo_root, "cat-file", "-e", f"{self.commit}:{rel}")
        if exists.returncode != 0:
            return None
        shown = _git(self.repo_root, "show", f"{self.commit}:{rel}")
        if shown.returncode != 0:
            raise GitRefError(f"git show {self.ref}:{rel} failed: {shown.stderr.strip()}")
        return shown.stdout

    def list_yaml(self, directory: Path) -> list[str]:
        """Names of the ``*.yaml`` files directly in ``directory`` at this ref."""
        rel = self.relative(directory)
        listed = _git(self.repo_root, "ls-tree", "--name-only", self.commit, f"{rel}/")
        if listed.returncode != 0:
            return []
        return sorted(Path(line).name for line in listed.stdout.splitlines() if line.endswith(".yaml"))

    def label(self, path: Path) -> Path:
        """How a file at this ref is named in messages: ``origin/main:baselines/x.yaml``."""
        return Path(f"{self.ref}:{self.relative(path)}")

    def loader(self) -> Callable[[Path], BaselineFile | None]:
        """A drop-in for ``baselines.load_baseline_file`` that reads the file at this ref."""
        from pytest_gpuperf.baselines import parse_baseline_text

        def load(path: Path) -> BaselineFile | None:
            text = self.read(path)
            if text is None:
                return None
            loaded = parse_baseline_text(self.label(path), text)
            loaded.path = path
            return loaded

        return load


@dataclass(frozen=True)
class BaselineChange:
    """One baseline entry the working tree changes against the ref."""

    file: str
    change: str
    test: str | None = None
    metric: str | None = None
    before: Any = None
    after: Any = None
    loosens: bool = False
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def _loosens(entry_before: dict[str, Any], entry_after: dict[str, Any]) -> bool:
    """True when the new baseline value accepts worse results than the old one."""
    before, after = entry_before.get("value"), entry_after.get("value")
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return False
    better = entry_after.get("better", entry_before.get("better", "lower"))
    return after > before if better == "lower" else (after < before if better == "higher" else False)


def _metric_change(file: str, test: str, metric: str, before: dict[str, Any], after: dict[str, Any]) -> BaselineChange:
    from pytest_gpuperf.units import format_change, format_value

    fields = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    unit = str(after.get("unit", before.get("unit", "")))
    old, new = before.get("value"), after.get("value")
    if old != new and isinstance(old, (int, float)) and isinstance(new, (int, float)):
        change = f" ({format_change(new / old)})" if old else ""
        detail = f"value {format_value(old, unit)} -> {format_value(new, unit)}{change}"
    elif old != new:
        detail = f"value {old} -> {new}"
    else:
        detail = "same value"
    others = [f for f in fields if f != "value"]
    if others:
        detail += f"; also changed: {', '.join(others)}"
    return BaselineChange(file, "metric changed", test, metric, old, new, _loosens(before, after), detail)


def diff_tests(
    file: str, before: dict[str, dict[str, dict[str, Any]]], after: dict[str, dict[str, dict[str, Any]]]
) -> list[BaselineChange]:
    """Changes between two ``tests`` mappings of one baseline file."""
    changes: list[BaselineChange] = []
    for test in sorted(set(before) | set(after)):
        if test not in after:
            n = len(before[test])
            changes.append(
                BaselineChange(file, "test removed", test, loosens=True, detail=f"{n} metric(s) no longer gated")
            )
            continue
        if test not in before:
            changes.append(BaselineChange(file, "test added", test, detail=f"{len(after[test])} metric(s)"))
            continue
        old, new = before[test], after[test]
        for metric in sorted(set(old) | set(new)):
            if metric not in new:
                changes.append(
                    BaselineChange(
                        file,
                        "metric removed",
                        test,
                        metric,
                        old[metric].get("value"),
                        loosens=True,
                        detail="no longer gated",
                    )
                )
            elif metric not in old:
                changes.append(BaselineChange(file, "metric added", test, metric, after=new[metric].get("value")))
            elif old[metric] != new[metric]:
                changes.append(_metric_change(file, test, metric, old[metric], new[metric]))
    return changes


def diff_against_ref(ref: GitRef, directory: Path) -> list[BaselineChange]:
    """Every baseline entry in the working tree's ``directory`` that differs from ``ref``."""
    from pytest_gpuperf.baselines import BaselineError, load_baseline_file, parse_baseline_text

    names = sorted(set(ref.list_yaml(directory)) | {p.name for p in directory.glob("*.yaml")})
    changes: list[BaselineChange] = []
    for name in names:
        path = directory / name
        file = ref.relative(path)
        try:
            text = ref.read(path)
            old = parse_baseline_text(ref.label(path), text) if text is not None else None
            new = load_baseline_file(path)
        except BaselineError as exc:
            changes.append(BaselineChange(file, "unreadable", detail=str(exc)))
            continue
        if old is None and new is not None:
            changes.append(BaselineChange(file, "file added", detail=f"{len(new.tests)} test(s)"))
            changes += diff_tests(file, {}, new.tests)
        elif new is None and old is not None:
            changes.append(BaselineChange(file, "file removed", loosens=True, detail=f"{len(old.tests)} test(s)"))
            changes += diff_tests(file, old.tests, {})
        elif old is not None and new is not None:
            changes += diff_tests(file, old.tests, new.tests)
    return changes
