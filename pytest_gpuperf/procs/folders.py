"""Private temp folders named for their owner: each names its owner process (pid and start time) and is removed
when the owner is done with it; folders of owners that died without cleaning up are swept when the next is made.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from pytest_gpuperf.procs.lifetime import process_alive, process_start_time

POOL_DIR_PREFIX = "gpuperf-pool-"
OWNER_FILE = "owner"
#: A folder of an older version (no owner file) untouched for this long belongs to a dead owner.
STALE_SECONDS = 3600.0


def claim(directory: Path) -> None:
    """Name this process (pid and start time: a recycled pid does not match) as ``directory``'s owner."""
    (directory / OWNER_FILE).write_text(f"{os.getpid()} {process_start_time(os.getpid())}\n")


def owner_alive(directory: Path) -> bool:
    """True while the process ``directory``'s owner file names runs; OSError without an owner file, ValueError
    when it names no process."""
    pid_text, _, start = (directory / OWNER_FILE).read_text().strip().partition(" ")
    return process_alive(int(pid_text), start)


def make_pool_dir(label: str) -> Path:
    """A fresh private folder ``gpuperf-pool-<label>-*`` in the temp dir, naming this process as its owner."""
    sweep_stale_pool_dirs()
    directory = Path(tempfile.mkdtemp(prefix=f"{POOL_DIR_PREFIX}{label}-"))
    claim(directory)
    return directory


def remove_pool_dir(directory: Path) -> None:
    """Remove a pool's folder (its logs were read before)."""
    shutil.rmtree(directory, ignore_errors=True)


def sweep_stale_pool_dirs(root: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove pool folders of this user whose owner process is dead; return what was removed."""
    root = Path(tempfile.gettempdir()) if root is None else root
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        candidates = list(root.glob(f"{POOL_DIR_PREFIX}*"))
    except OSError:
        return removed
    for directory in candidates:
        try:
            info = directory.lstat()
            if not directory.is_dir() or directory.is_symlink() or info.st_uid != os.getuid():
                continue
            if (directory / OWNER_FILE).exists():
                stale = not owner_alive(directory)
            else:
                stale = now - info.st_mtime > STALE_SECONDS
        except (OSError, ValueError):
            continue
        if stale:
            remove_pool_dir(directory)
            removed.append(directory)
    return removed
