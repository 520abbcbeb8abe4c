"""Inner pytest runs for the suite's end-to-end tests, forked from a server that imported torch once.

``pytester.runpytest`` in subprocess mode starts ``python -m pytest`` for every inner run, and each of those
~170 runs used to spend seconds importing torch. :class:`ForkServer` starts :mod:`tests.fork_server` once per
outer pytest process (each xdist worker has its own); :func:`forked_runpytest` is a drop-in for
``Pytester.runpytest_subprocess``: the same arguments (``--basetemp``, ``pytester.plugins``), the same
environment (``os.environ`` at call time, the working directory first on ``PYTHONPATH``), the same files and
printout, and a :class:`pytest.RunResult`. Tests that need a process started from scratch (signals to the
inner run, lazily imported modules, ...) carry ``@pytest.mark.fresh_process`` and keep the subprocess path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from _pytest.pathlib import make_numbered_dir

SERVER_SCRIPT = Path(__file__).with_name("fork_server.py")


def project_sources() -> dict[str, float]:
    """Modification times of the plugin's source files, which the server imports once and keeps.

    An edit (or a ``git rebase``) during a long run would otherwise leave the server's children running the old
    modules it preloaded next to new ones imported from disk.
    """
    spec = importlib.util.find_spec("pytest_gpuperf")
    if spec is None or not spec.submodule_search_locations:
        return {}
    times = {}
    for folder in spec.submodule_search_locations:
        for path in Path(folder).rglob("*.py"):
            with contextlib.suppress(OSError):
                times[str(path)] = path.stat().st_mtime
    return times


class ForkServer:
    """One long-lived :mod:`tests.fork_server` process; started on first use, restarted if it died or the
    plugin's sources changed since it started."""

    def __init__(self, log_dir: Path) -> None:
        self.log_path = log_dir / "fork-server.log"
        #: The host-CPU roofs its children measured (``tests.fork_server.share_roofs``), kept across restarts.
        self.roofs_memo = log_dir / "fork-server-roofs.json"
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: socket.socket | None = None
        self._reader: Any = None
        self._sources: dict[str, float] = {}

    def start(self) -> None:
        """Start the server process (it imports torch and pytest, then waits for requests)."""
        self._sources = project_sources()
        ours, theirs = socket.socketpair()
        env = dict(os.environ)  # PYTHONPATH too: the server preloads the plugin this outer run imports
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, str(SERVER_SCRIPT), str(theirs.fileno()), str(self.roofs_memo)],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=tempfile.gettempdir(),
            )
        theirs.close()
        self._conn = ours
        self._reader = ours.makefile("rb")

    def _reply(self, timeout: float | None) -> dict[str, Any]:
        assert self._conn is not None
        self._conn.settimeout(timeout)
        line = self._reader.readline()
        if not line:
            self.close()
            raise RuntimeError(f"the inner-run fork server exited; its log: {self.log_path}")
        return json.loads(line)

    def run(self, args: list[str], stdout: Path, stderr: Path, timeout: float | None = None) -> int:
        """Run ``pytest ARGS`` in a forked child here (cwd, env); its return code as ``Popen`` gives it."""
        if self._proc is not None and project_sources() != self._sources:
            self.close()
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        assert self._conn is not None
        request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "stdout": str(stdout)}
        request["stderr"] = str(stderr)
        self._conn.sendall((json.dumps(request) + "\n").encode())
        pid = self._reply(None)["pid"]
        try:
            return self._reply(timeout)["returncode"]
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._reader = self._conn.makefile("rb")  # a socket file that timed out refuses further reads
            self._reply(None)
            raise

    def close(self) -> None:
        """End the server (end of input) and wait for it."""
        if self._conn is not None:
            self._reader.close()
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def forked_runpytest(
    pytester: pytest.Pytester, server: ForkServer, *args: str | os.PathLike[str], timeout: float | None = None
) -> pytest.RunResult:
    """``pytester.runpytest(*args)`` as subprocess mode runs it, with the inner pytest forked from ``server``."""
    __tracebackhide__ = True
    new_args = pytester._ensure_basetemp(args)
    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    cmd: list[str] = [f"--basetemp={basetemp}", *(os.fspath(a) for a in new_args)]
    for plugin in pytester.plugins:
        if not isinstance(plugin, str):
            raise ValueError(f"pytester subprocess mode takes plugins by name, not objects: {plugin}")
        cmd = ["-p", plugin, *cmd]
    out_path, err_path = pytester.path / "stdout", pytester.path / "stderr"
    print("running (forked):", sys.executable, "-mpytest", *cmd)
    print("     in:", Path.cwd())
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:  # what Pytester.popen adds: the working directory is importable
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH", "")])))
        try:
            ret = server.run(cmd, out_path, err_path, timeout)
        except TimeoutError:
            raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: {cmd}") from None
    duration = time.perf_counter() - start
    out = out_path.read_text(encoding="utf8").splitlines()
    err = err_path.read_text(encoding="utf8").splitlines()
    for lines, stream in ((out, sys.stdout), (err, sys.stderr)):
        for line in lines:
            print(line, file=stream)
    return pytest.RunResult(ret, out, err, duration)
