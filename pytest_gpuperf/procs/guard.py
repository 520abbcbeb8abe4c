"""A guard process between pytest and every command the plugin starts: nothing outlives pytest.

``python -I .../procs/guard.py PID START -- command...`` runs ``command`` and
makes sure it, and everything it starts, is gone within a fraction of a second of pytest
going away, however it goes (Ctrl-C, SIGTERM, SIGKILL, a crash):

* the guard leads its own session and process group (pytest starts it with
  ``start_new_session``): the command and its children are in a group the plugin owns;
* it is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): a process that leaves the group
  (torchrun starts each rank in a new session) and whose parent dies is re-parented to the
  guard, never to init, so it stays findable as a descendant;
* it asks for ``SIGTERM`` when pytest dies (``PR_SET_PDEATHSIG``) and also polls pytest's
  ``/proc`` entry every :data:`POLL_SECONDS` (a zombie or a recycled pid counts as dead), so
  even a ``kill -9`` of pytest is noticed;
* then it SIGKILLs every descendant, every process carrying its token in the environment
  (``GPUPERF_GUARD_TOKEN``), and its own group.

When the command ends by itself, leftovers (an orphaned rank) are killed too, and the guard
exits with the command's status (re-raising a signal that killed it, so callers see the same
``returncode``). The pytest side uses :func:`popen_guarded` / :func:`stop_guarded`.
Linux only; elsewhere :func:`popen_guarded` starts the command directly in a new session.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLL_SECONDS = 0.1
TOKEN_ENV = "GPUPERF_GUARD_TOKEN"
#: Seconds :func:`stop_guarded` lets the guard clean up before it kills the whole group itself.
STOP_GRACE_SECONDS = 2.0
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def supported() -> bool:
    """True where the guard works (Linux with /proc)."""
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _prctl(option: int, value: int) -> bool:
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _load_lifetime() -> Any:
    """:mod:`.lifetime` (standard library only): imported as usual, or loaded from this folder by path when the
    guard runs isolated (``python -I guard.py``: no package on ``sys.path``, and an A/B worker's ``PYTHONPATH``
    may hold another version of this package)."""
    if __package__:
        from pytest_gpuperf.procs import lifetime

        return lifetime
    import importlib.util

    spec = importlib.util.spec_from_file_location("_gpuperf_guard_lifetime", Path(__file__).with_name("lifetime.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_lifetime = _load_lifetime()


def marked(token: str) -> list[int]:
    """Processes whose environment holds ``GPUPERF_GUARD_TOKEN=<token>`` (readable ones: this user's)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_everything(token: str) -> None:
    """SIGKILL every descendant of this process and every process marked with ``token``, until none is left."""
    me = os.getpid()
    for _ in range(50):
        pids = (set(_lifetime.descendants(me)) | set(marked(token))) - {me}
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        _reap()


def main(argv: list[str]) -> int:
    """Run the command after ``--`` while the pytest process ``argv[0]`` (start time ``argv[1]``) lives."""
    parent, start, command = int(argv[0]), argv[1], argv[3:]
    token = os.environ.get(TOKEN_ENV) or secrets.token_hex(8)
    stop: list[int] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if not _lifetime.process_alive(parent, start):  # pytest died before the request took effect
        return 137
    child = subprocess.Popen(command, env={**os.environ, TOKEN_ENV: token})
    code: int | None = None
    while code is None:
        try:
            code = child.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        if code is None and (stop or os.getppid() != parent or not _lifetime.process_alive(parent, start)):
            break  # asked to stop, or pytest is gone (re-parented, a zombie or a recycled pid)
    kill_everything(token)
    if code is None:
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the last step: the group, this guard included
        return 137
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their default: nothing to restore
            pass
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


# -- the pytest side -------------------------------------------------------------------------------------------------


def popen_guarded(command: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``command`` under a guard (a new session the plugin owns); same arguments as ``subprocess.Popen``."""
    run_env = dict(os.environ if env is None else env)
    kwargs.pop("start_new_session", None)
    if not supported():
        return subprocess.Popen(command, env=run_env, start_new_session=True, **kwargs)
    run_env[TOKEN_ENV] = secrets.token_hex(8)
    me, start = os.getpid(), _lifetime.process_start_time(os.getpid())
    # Run by path, isolated (-I): the guard needs only the standard library, whatever PYTHONPATH the command gets
    # (an A/B worker of the ref's side may put another version of this package first).
    guard = [sys.executable, "-I", str(Path(__file__).resolve()), str(me), start, "--", *command]
    proc = subprocess.Popen(guard, env=run_env, start_new_session=True, **kwargs)
    proc.gpuperf_token = run_env[TOKEN_ENV]  # type: ignore[attr-defined]
    return proc


def stop_guarded(proc: subprocess.Popen[Any]) -> None:
    """Kill a guarded command and everything it started: the guard's group, its descendants, its marked processes."""
    pids = _lifetime.descendants(proc.pid) if supported() else []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    token = getattr(proc, "gpuperf_token", None)
    for pid in set(pids) | set(marked(token) if token else []):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_guarded(command: list[str], timeout: float | None = None, **kwargs: Any) -> tuple[int, Any, bool]:
    """``(returncode, stdout, timed_out)`` of ``command`` run under a guard; on a timeout, Ctrl-C or any error
    everything it started is killed before this returns or raises (``subprocess.run`` kills only the child)."""
    proc = popen_guarded(command, **kwargs)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_guarded(proc)
        out, _ = proc.communicate()
        return -1, out, True
    except BaseException:
        stop_guarded(proc)
        raise
    return proc.returncode, out, False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
