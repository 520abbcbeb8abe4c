"""A child's exit without the interpreter's module teardown.

Standard library only, and no package imports: an A/B worker loads this file by path from the running install
(REF's side imports another, possibly older, version of the package; see :mod:`pytest_gpuperf.procs`).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Leave a child process the plugin started, once its results are out: non-daemon threads are joined, atexit
    handlers run and the streams are flushed, as at a normal exit, but the interpreter's module teardown (a large
    share of a second of CPU once torch is imported, paid by every rank, replica and A/B worker) is skipped."""
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
