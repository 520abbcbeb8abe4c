"""How long a script's ranks waited for a CPU while it ran: the contention of a wall-clocked script.

A ``gpuperf_torchrun`` script times its own steps with the wall clock, so on a busy host its tokens/s counts the
time its ranks sat in the run queue behind other jobs. :class:`RankWait` polls, while the script runs, the
scheduler's counters of every thread below the launcher (``/proc/<pid>/task/<tid>/schedstat``: time on a CPU, time
waiting for one) and keeps each thread's last reading; :func:`wait_facts` turns the share of waiting into the facts
the judge reads (:func:`pytest_gpuperf.judging.evidence.conditions_rule`): a wall-clocked slowdown that the waiting
explains is inconclusive, one far past it still fails.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pytest_gpuperf.procs.lifetime import descendants
from pytest_gpuperf.timing.contention import WAIT_SHARE_LIMIT

#: Seconds between two polls of the ranks' counters (a thread that lives less than this may be missed).
POLL_SECONDS = 0.25


def read_schedstat(path: Path) -> tuple[int, int] | None:
    """``(ns on a CPU, ns waiting for one)`` of one thread, or None when it is gone or unreadable."""
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return int(fields[0]), int(fields[1])


class RankWait:
    """Polls the run and wait time of every thread below ``root`` (a launcher's pid) while it is entered."""

    def __init__(self, root: int, proc: Path = Path("/proc"), interval: float = POLL_SECONDS) -> None:
        self.root, self.proc, self.interval = root, proc, interval
        self.seen: dict[tuple[int, str], tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuperf-rank-wait", daemon=True)

    def poll(self) -> None:
        """Read every thread of the root's descendants once, keeping its latest counters."""
        for pid in descendants(self.root):
            for task in (self.proc / str(pid) / "task").glob("[0-9]*"):
                reading = read_schedstat(task / "schedstat")
                if reading is not None:
                    self.seen[(pid, task.name)] = reading

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> RankWait:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def share(self) -> float | None:
        """The ranks' time waiting for a CPU over their time on one plus waiting, or None when nothing was read."""
        run = sum(r for r, _ in self.seen.values())
        wait = sum(w for _, w in self.seen.values())
        return wait / (run + wait) if run + wait > 0 else None


def wait_facts(share: float | None) -> dict[str, Any]:
    """The facts a wall-clocked script metric carries: ``rank_wait_share`` and, past the contention guard's limit
    (:data:`~pytest_gpuperf.timing.contention.WAIT_SHARE_LIMIT`), ``contended``."""
    if share is None:
        return {}
    return {"rank_wait_share": round(share, 4), "contended": share > WAIT_SHARE_LIMIT}
