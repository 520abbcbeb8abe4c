"""``--gpuperf-baseline-ref REF``: read baseline files at a git ref instead of the working tree.

A PR that edits ``baselines/`` must not quietly loosen the gate it is judged by: with
``--gpuperf-baseline-ref origin/main`` every baseline file is read with ``git show
REF:path`` (argv, never a shell). :class:`RefLoader` is the loader the judging service
reads through (the reporting feature returns it from ``pytest_gpuperf_baseline_loader``);
ranks get the entries looked up through it. It pickles (a frozen dataclass of strings
and paths). What the working tree changes against the ref is listed by
:mod:`pytest_gpuperf.baselines.diff`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.baselines.schema import BaselineFile


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
        from pytest_gpuperf.baselines import schema

        size = _git(self.repo_root, "cat-file", "-s", f"{self.commit}:{rel}")
        if size.returncode != 0:
            return None
        if int(size.stdout.strip() or 0) > schema.MAX_FILE_BYTES:  # never pull a huge blob into memory
            raise schema.BaselineError(self.label(path), f"is larger than the {schema.MAX_FILE_BYTES} bytes read")
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

    def loader(self) -> RefLoader:
        """A drop-in for :func:`~pytest_gpuperf.baselines.load_baseline_file` that reads the file at this ref."""
        return RefLoader(self)


#: Reads one baseline file: :func:`~pytest_gpuperf.baselines.load_baseline_file` (the working tree) or a
#: :class:`RefLoader`; both pickle, so a rank can be handed the pytest process's loader.
BaselineLoader = Callable[[Path], "BaselineFile | None"]


@dataclass(frozen=True)
class RefLoader:
    """Loads baseline files as they are at a git ref; errors name ``REF:path`` and the line."""

    ref: GitRef

    def __call__(self, path: Path) -> BaselineFile | None:
        """The parsed file at the ref (its ``path`` the working-tree path); None when the ref has none."""
        from pytest_gpuperf.baselines.schema import parse_baseline_text

        key = (self.ref.commit, str(path))
        if key not in _PARSED_AT_REF:  # a commit never changes: each file is read and parsed once per process
            text = self.ref.read(path)
            loaded = None
            if text is not None:
                loaded = parse_baseline_text(self.ref.label(path), text)
                loaded.path = path
            _PARSED_AT_REF[key] = loaded
        return _PARSED_AT_REF[key]


#: Files parsed at a commit, by (commit, working-tree path); shared read-only like the working tree's cache.
_PARSED_AT_REF: dict[tuple[str, str], BaselineFile | None] = {}


#: The resolved ``--gpuperf-baseline-ref`` of the session (set by the baselines plugin at configure).
REF_KEY = pytest.StashKey["GitRef"]()
