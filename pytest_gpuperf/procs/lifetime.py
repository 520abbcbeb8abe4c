"""Process lifetimes: is a process still there, what runs below it, how it ended, kill its group.

* :func:`process_alive`: a process that is gone, a zombie (killed but not yet reaped by its
  parent: ``os.kill(pid, 0)`` still succeeds on it) or a recycled pid all count as dead;
* :func:`die_with_parent`: ``PR_SET_PDEATHSIG`` (Linux), so a rank dies with its launcher;
* :func:`descendants` / :func:`kill_group`: what a child started, and its end.

Standard library only, and no package imports: the guard, run isolated, loads this file by path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (each rank and launcher leads its own), else the pid."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
