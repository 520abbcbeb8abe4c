"""pytest hooks of the A/B feature (``--gpuperf-ab REF``); imported at start-up, so nothing heavy here.

The controller checks REF out into a temporary worktree at configure time, runs every perf
test's A and B workers before the test loop (on a pytest-xdist worker: per test, on that
worker's GPU), and then, instead of running a perf test's body itself, turns the workers'
evidence into the test's verdicts (:mod:`.verdicts`), which the session reports in place of the
stored-baseline ones (:meth:`.state.AbState.pytest_gpuperf_replace_verdicts`), so the terminal, Markdown,
JSON and JUnit reports show them like any other verdict, plus an A/B section of their own.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.keys import SESSION_KEY
from pytest_gpuperf.settings import add_options, get_option, ini_name, needs_gpuperf_message

if TYPE_CHECKING:
    from pytest_gpuperf.ab.state import AbState

AB_OPTIONS: list[tuple[Any, ...]] = [
    (
        "--gpuperf-ab",
        "str",
        "",
        "A/B against a git ref (e.g. origin/main): measure REF's code and the working tree's in alternating "
        "worker processes on this machine and judge B against A instead of a stored baseline",
        {"metavar": "REF"},
    ),
    ("gpuperf_ab_processes", "int", 2, "A/B: worker processes per side for every test (at least 2)", {"minimum": 2}),
    (
        "gpuperf_ab_max_processes",
        "int",
        4,
        "A/B: worker processes per side at most, for tests still undecided",
        {"minimum": 2},
    ),
    ("gpuperf_ab_max_time", "float", 0.5, "A/B: measuring budget per measure() call in a worker", {"above": 0}),
    (
        "gpuperf_ab_timeout",
        "float",
        1800.0,
        "A/B: seconds one worker process may run before it is killed",
        {"above": 0, "section": "timeouts"},
    ),
]
STATE_KEY = pytest.StashKey["AbState"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the A/B flag and ini keys."""
    add_options(parser, AB_OPTIONS, "A/B")


def _state(config: pytest.Config) -> AbState | None:
    return config.stash.get(STATE_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--gpuperf-ab REF``: validate, resolve REF and check it out (once, shared with xdist workers)."""
    given = config.getoption(ini_name("--gpuperf-ab"), default=None)
    if given is not None and not str(given).strip():  # `--gpuperf-ab ""`: an unset CI variable, not "no A/B"
        raise pytest.UsageError(
            "--gpuperf-ab was given an empty value (an unset variable?); give a git ref such as origin/main, "
            "or drop the option to run without A/B"
        )
    ref = get_option(config, "--gpuperf-ab")
    if not ref or not ref.strip():
        return
    from pytest_gpuperf.ab.gitref import AbRefError, check_ref_name

    try:
        check_ref_name(ref)  # a malformed REF is a usage error whatever else is on the command line
    except AbRefError as exc:
        raise pytest.UsageError(str(exc)) from None
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        raise pytest.UsageError(needs_gpuperf_message(f"--gpuperf-ab {ref}", "measures perf tests"))
    from pytest_gpuperf.ab.state import AbState

    try:
        state = AbState.start(config, session, ref)
    except AbRefError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(state, "gpuperf-ab")  # collects A/B results from reports (and xdist's)
    if state.worktree.owned:
        state.hand_to_xdist_workers()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the first workers now: their start-up (Python, torch, CUDA) overlaps this process's collection."""
    state = _state(session.config)
    if state is not None and not session.config.option.collectonly:
        state.prestart()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Kill unused workers and reap the ones that ran; remove the worktree (the process that created it) and the
    variables handed to xdist workers."""
    state = _state(config)
    if state is None:
        return
    state.discard()
    if state.worktree.owned:
        state.hand_to_xdist_workers(clear=True)
    state.worktree.remove()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, None, None]:
    """Before the tests run: all A/B rounds at once (the xdist controller, which runs none, lists new/removed)."""
    state = _state(session.config)
    if state is not None and not session.config.option.collectonly:
        if state.is_xdist_controller:
            state.scan_scope()  # new and removed tests, listed while the workers run theirs
        elif not state.is_xdist_worker:
            state.run_items(session.items)
    yield
    if state is not None:
        state.finish_scan()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A perf test's verdicts come from its A and B workers; its body does not run here."""
    state = _state(pyfuncitem.config)
    if state is None or not state.is_perf(pyfuncitem):
        return None
    if state.is_xdist_worker and pyfuncitem.nodeid not in state.handled:
        state.run_items(state.batch_for(pyfuncitem))  # both sides on this worker's GPU
    return state.apply(pyfuncitem)
