"""A second Ctrl-C while pytest winds down after the first: kill the workers and exit, without a traceback.

The first Ctrl-C kills the rank pool and the replica workers at once (SIGKILL, no graceful
stop) and lets pytest print its usual interrupted summary. Pressing Ctrl-C again during that
wind-down (fixture teardown, reports) used to raise a second ``KeyboardInterrupt`` somewhere in
pytest's own code and print a raw traceback; with this handler armed it kills whatever worker
is left, says so in one line and exits with pytest's "interrupted" code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

_PREVIOUS_KEY = pytest.StashKey[Any]()
MESSAGE = "pytest-gpuperf: interrupted again: worker processes killed, exiting now (no summary)\n"


def arm_second_interrupt(config: pytest.Config, kill_workers: Callable[[], None]) -> bool:
    """Install the handler for the next SIGINT (main thread only); True when installed."""
    if threading.current_thread() is not threading.main_thread() or _PREVIOUS_KEY in config.stash:
        return False

    def on_second_interrupt(signum: int, frame: object) -> None:
        try:
            kill_workers()
        finally:
            try:
                sys.stderr.write("\n" + MESSAGE)
                sys.stderr.flush()
            finally:
                os._exit(int(pytest.ExitCode.INTERRUPTED))

    config.stash[_PREVIOUS_KEY] = signal.signal(signal.SIGINT, on_second_interrupt)
    return True


def disarm_second_interrupt(config: pytest.Config) -> None:
    """Put back the SIGINT handler that was there before (so an in-process pytester run leaves none behind)."""
    if _PREVIOUS_KEY not in config.stash or threading.current_thread() is not threading.main_thread():
        return
    previous = config.stash[_PREVIOUS_KEY]
    del config.stash[_PREVIOUS_KEY]
    signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
