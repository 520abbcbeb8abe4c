"""Process hygiene for worker pools: is the pytest process still there, kill a process group, temp folders.

* :func:`process_alive`: a process that is gone, a zombie (killed but not yet reaped by its
  parent: ``os.kill(pid, 0)`` still succeeds on it) or a recycled pid all count as dead;
* :func:`die_with_parent`: ``PR_SET_PDEATHSIG`` (Linux), so a rank dies with its launcher;
* :func:`make_pool_dir` / :func:`sweep_stale_pool_dirs`: each pool's folder names its owner
  (pid and start time) and is removed when the pool closes; folders of owners that died
  without cleaning up are swept when the next pool starts;
* :func:`exit_now`: a worker's exit without the interpreter's module teardown.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NoReturn

POOL_DIR_PREFIX = "gpuperf-pool-"
OWNER_FILE = "owner"
#: A folder of an older version (no owner file) untouched for this long belongs to a dead pool.
STALE_SECONDS = 3600.0


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state is [0], start time [19]), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" where /proc is absent or it is gone)."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else ""


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc; empty where /proc is absent)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(int(entry.name))
        if fields is not None and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def process_alive(pid: int, start_time: str = "") -> bool:
    """True while ``pid`` runs: not gone, not a zombie, and (given ``start_time``) not a recycled pid."""
    if sys.platform.startswith("linux") and Path("/proc/self/stat").exists():
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X", "x"):
            return False
        return not start_time or len(fields) <= 19 or fields[19] == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux only); True when set."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        return libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def describe_exit(proc: subprocess.Popen[bytes] | None, wait: float = 2.0) -> str:
    """How a process ended: ``exited with code 3``, ``was killed by signal 9 (SIGKILL)`` ("" while it runs)."""
    if proc is None:
        return ""
    try:
        code = proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def exit_now(code: int) -> NoReturn:
    """Leave a worker process the plugin started, once its results are sent: non-daemon threads are joined,
    atexit handlers run and the streams are flushed, as at a normal exit, but the interpreter's module teardown is
    skipped (about 0.5 s of CPU in a process that imported torch, paid by every rank, replica and A/B worker)."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (each rank and launcher leads its own), else the pid."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def make_pool_dir(label: str) -> Path:
    """A fresh private folder ``gpuperf-pool-<label>-*`` in the temp dir, naming this process as its owner."""
    sweep_stale_pool_dirs()
    directory = Path(tempfile.mkdtemp(prefix=f"{POOL_DIR_PREFIX}{label}-"))
    (directory / OWNER_FILE).write_text(f"{os.getpid()} {process_start_time(os.getpid())}\n")
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
            owner = directory / OWNER_FILE
            if owner.exists():
                pid_text, _, start = owner.read_text().strip().partition(" ")
                stale = not process_alive(int(pid_text), start)
            else:
                stale = now - info.st_mtime > STALE_SECONDS
        except (OSError, ValueError):
            continue
        if stale:
            remove_pool_dir(directory)
            removed.append(directory)
    return removed
