"""REF for ``--gpuperf-ab``: validated, resolved to a commit, checked out into a temporary git worktree.

Every git call takes an argument vector (never a shell), and a ref that looks like an
option or carries shell or control characters is refused before git sees it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pytest_gpuperf.procs.folders import OWNER_FILE as OWNER_FILE  # the owner file of a holder folder
from pytest_gpuperf.procs.folders import claim, owner_alive

#: Characters a ref name, a sha or a revision expression (``HEAD~1``, ``main^``, ``@{u}``) may hold.
_REF_CHARS = re.compile(r"^[A-Za-z0-9._/~^@{}+-]+$")
#: Prefix of the temporary folders holding REF's worktree; its owner file names the process that made it
#: (:func:`pytest_gpuperf.procs.folders.claim`).
HOLDER_PREFIX = "gpuperf-ab-"
#: Suffixes of compiled extension modules that a fresh checkout of REF does not contain.
EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")


class AbRefError(Exception):
    """REF cannot be used (bad name, unknown to git, not a repository, worktree failed)."""


def check_ref_name(ref: str) -> str:
    """``ref`` stripped, or :class:`AbRefError` when it is empty, option-like or holds odd characters."""
    ref = ref.strip()
    if not ref:
        raise AbRefError("--gpuperf-ab: empty git ref; give a branch, tag or commit such as origin/main")
    if ref.startswith("-"):
        raise AbRefError(f"--gpuperf-ab: {ref!r} looks like an option, not a git ref")
    if not _REF_CHARS.match(ref) or ".." in ref:
        raise AbRefError(
            f"--gpuperf-ab: {ref!r} is not a plain git ref (allowed: letters, digits and . _ / ~ ^ @ {{ }} + -; "
            "no ranges, spaces or shell characters)"
        )
    return ref


def git(cwd: Path, *args: str, timeout: float = 120.0) -> str:
    """Run ``git -C cwd args...`` (argv, no shell); its stdout, or :class:`AbRefError` with git's message."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AbRefError(f"--gpuperf-ab: git {' '.join(args)} failed: {exc}") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise AbRefError(f"--gpuperf-ab: git {' '.join(args)}: {message[-1] if message else 'failed'}")
    return proc.stdout


def toplevel(path: Path) -> Path:
    """The top folder of the git working tree that holds ``path``."""
    try:
        return Path(git(path, "rev-parse", "--show-toplevel").strip()).resolve()
    except AbRefError:
        raise AbRefError(f"--gpuperf-ab needs a git repository; {path} is not inside one") from None


def resolve_commit(repo: Path, ref: str) -> str:
    """The full commit sha ``ref`` names in ``repo``."""
    ref = check_ref_name(ref)
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}").strip()
    except AbRefError:
        raise AbRefError(
            f"--gpuperf-ab: {ref!r} is not a commit of {repo} (fetch it first, e.g. git fetch origin main)"
        ) from None


@dataclass
class Worktree:
    """REF checked out (detached) into a temporary folder; :meth:`remove` takes it away again."""

    ref: str
    sha: str
    repo: Path
    path: Path
    owned: bool = True

    @classmethod
    def create(cls, repo: Path, ref: str) -> Worktree:
        """Check ``ref`` out into a new temporary worktree of ``repo`` (its toplevel)."""
        sha = resolve_commit(repo, ref)
        sweep_stale(repo)
        holder = Path(tempfile.mkdtemp(prefix=HOLDER_PREFIX))
        claim(holder)
        path = holder / "ref"
        try:
            git(repo, "worktree", "prune")
            git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha, timeout=600.0)
        except AbRefError:
            shutil.rmtree(holder, ignore_errors=True)
            raise
        return cls(ref, sha, repo, path.resolve())

    @property
    def short(self) -> str:
        """The first 12 hex digits of the sha."""
        return self.sha[:12]

    def remove(self) -> None:
        """Remove the worktree and its temporary folder (idempotent; only one this object created)."""
        if not self.owned or not self.path.parent.exists():
            return
        try:
            git(self.repo, "worktree", "remove", "--force", str(self.path))
        except AbRefError:
            pass
        shutil.rmtree(self.path.parent, ignore_errors=True)
        try:
            git(self.repo, "worktree", "prune")
        except AbRefError:
            pass


def _owner_alive(holder: Path) -> bool:
    """True unless ``holder``'s owner file names a process that no longer runs (a killed A/B run)."""
    try:
        return owner_alive(holder)
    except (OSError, ValueError):
        return True  # not ours to judge: leave it


def sweep_stale(repo: Path) -> list[Path]:
    """Remove ``repo``'s A/B worktrees left by runs that were killed (their owner process is gone)."""
    try:
        listing = git(repo, "worktree", "list", "--porcelain")
    except AbRefError:
        return []
    removed = []
    for line in listing.splitlines():
        if not line.startswith("worktree "):
            continue
        path = Path(line[len("worktree ") :])
        holder = path.parent
        if path.name != "ref" or not holder.name.startswith(HOLDER_PREFIX) or _owner_alive(holder):
            continue
        try:
            git(repo, "worktree", "remove", "--force", str(path))
        except AbRefError:
            pass
        shutil.rmtree(holder, ignore_errors=True)
        removed.append(path)
    if removed:
        try:
            git(repo, "worktree", "prune")
        except AbRefError:
            pass
    return removed


def untracked_extensions(repo: Path, package_dirs: list[Path]) -> list[str]:
    """Compiled extension files under ``package_dirs`` that git does not track (built only in this tree)."""
    found: list[Path] = []
    for directory in package_dirs:
        found += [p for p in directory.rglob("*") if p.suffix in EXTENSION_SUFFIXES and p.is_file()]
    if not found:
        return []
    relative = [p.resolve().relative_to(repo).as_posix() for p in found]
    tracked = set(git(repo, "ls-files", "-z", "--", *relative).split("\0"))
    return sorted(r for r in relative if r not in tracked)
