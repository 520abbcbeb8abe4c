"""The hooks through which feature plugins extend the core (registered by ``pytest_addhooks``).

Like pytest-xdist's ``newhooks.py``: a feature implements these in its plugin module (or in an
object it registers with ``config.pluginmanager.register``); it never reaches into the session.

* :func:`pytest_gpuperf_after_measure`: add metrics (bound verdicts, profiler numbers) to a step;
* :func:`pytest_gpuperf_baseline_loader`: read baselines from somewhere else (a git ref);
* :func:`pytest_gpuperf_write_baselines`: veto writing this process's baseline updates (ranks != 0);
* :func:`pytest_gpuperf_run_in_fresh_processes`: run a test again in fresh processes (replication, confirmation).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.baselines import BaselineFile
    from pytest_gpuperf.extensions import MeasureContext
    from pytest_gpuperf.results import Metric


def pytest_gpuperf_after_measure(context: MeasureContext) -> list[Metric] | None:
    """Return extra metrics for a step the core just timed (``context.timing``) and measured.

    Called once per ``gpuperf.measure()`` in the pytest process, after timing and before
    judging; the returned metrics are judged, stored and reported like the core's own.
    ``context.judging`` answers baseline questions (``entry(context.test, name)``).
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_baseline_loader(config: pytest.Config) -> Callable[[Path], BaselineFile | None] | None:
    """Return a reader of baseline files to use instead of the working tree's (first non-None wins).

    Asked once, at the first baseline lookup; the same entries are sent to distributed ranks.
    """


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_write_baselines(config: pytest.Config) -> bool | None:
    """Return False to keep this process from writing its ``--gpuperf-update`` entries (first non-None wins)."""


@pytest.hookspec(firstresult=True)
def pytest_gpuperf_run_in_fresh_processes(item: pytest.Item, processes: int) -> list[list[Metric]] | None:
    """Run the running test ``item`` again in ``processes`` fresh processes; return each one's metrics (unjudged).

    Called from the call phase, after the test body: to record a baseline from several processes
    (``gpuperf_processes``) and to confirm a suspected regression in a fresh process. Raise with the
    reason when the test cannot run elsewhere; return None when this plugin does not replicate.
    """
