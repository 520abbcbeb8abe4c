"""The gate of a prestarted child: it starts up (Python, imports, collection, CUDA context) ahead of its turn, then
waits for one word from the process that started it: :data:`GO` (run) or anything else (leave without running).

One protocol, two carriers, chosen by what stands between the two processes:

* the child's stdin (:class:`PipeGate` / :func:`wait_on_pipe`): the child blocks in a read, at no CPU cost while
  the parent measures; a parent that went away closes the pipe, which reads as "stop" (A/B workers);
* a file the parent writes atomically (:class:`FileGate` / :func:`wait_on_file`), for a child whose stdin is not
  the parent's (ncu starts it); the child polls the file and the parent's pid (a gone parent reads as "stop").

Standard library only, and no package imports: a child loads this file by path (see :mod:`pytest_gpuperf.procs`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, Any

GO = "go"
STOP = "stop"
#: Seconds between two looks at a file gate.
POLL_SECONDS = 0.02


class PipeGate:
    """The parent's side of a gate on the child's stdin (``stdin=subprocess.PIPE``, text mode)."""

    def __init__(self, stdin: IO[Any] | None) -> None:
        self.stdin = stdin

    def open(self, word: str) -> None:
        """Say ``word`` and close the pipe (a child that already left is no error: its output says why)."""
        try:
            assert self.stdin is not None
            self.stdin.write(word + "\n")
            self.stdin.close()
        except (OSError, ValueError):
            pass


class FileGate:
    """The parent's side of a gate file: the child reads ``path`` once it exists."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, word: str) -> None:
        """Write ``word`` atomically (the child never reads half of it)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(word, encoding="utf-8")
        os.replace(temporary, self.path)


def hold_stdin() -> int:
    """A copy of this process's stdin, taken before pytest's capture replaces fd 0; read it with
    :func:`wait_on_pipe`."""
    return os.dup(0)


def wait_on_pipe(fd: int) -> bool:
    """In a gated child: block until a line comes on ``fd``; True for :data:`GO`, False otherwise (or at EOF)."""
    word = b""
    while not word.endswith(b"\n"):
        chunk = os.read(fd, 64)
        if not chunk:
            break
        word += chunk
    return word.strip() == GO.encode()


def wait_on_file(gate: Path, parent: int, poll: float = POLL_SECONDS) -> bool:
    """In a gated child: wait until the parent writes ``gate``; True for :data:`GO`, False for anything else or a
    parent that is gone."""
    while True:
        try:
            return gate.read_text(encoding="utf-8").strip() == GO
        except OSError:
            pass
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        time.sleep(poll)
