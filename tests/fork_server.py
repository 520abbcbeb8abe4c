"""A fork server for the suite's inner pytest runs: torch and pytest are imported once, each run is a forked child.

Most of the suite's time used to go to ~170 inner ``python -m pytest`` processes that each import torch. This
script, started once per outer pytest process (:mod:`tests.inner_runs` starts it), imports the heavy modules
and then serves requests on a socket: for each one it forks a child, which becomes what a fresh
``python -m pytest ARGS`` started in the request's directory with the request's environment would be (working
directory, ``os.environ``, ``sys.path`` with ``PYTHONPATH``, ``sys.argv``, ``__main__``, stdio redirected to
files), runs ``pytest.main(ARGS)`` and exits as the plugin's workers do (:func:`exit_now`: non-daemon threads
joined, atexit handlers, streams flushed, but no module teardown, which would cost ~0.5 s of CPU and write to every
preloaded page, copying it).

The server itself runs no torch operation, so no intra-op or OpenMP thread pool exists when it forks.

Protocol (one JSON object per line): request ``{"args", "cwd", "env", "stdout", "stderr"}``; answers
``{"pid": N}`` once the child exists, then ``{"returncode": R}`` with R as :class:`subprocess.Popen` reports it
(negative: killed by that signal). End of input ends the server.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import socket
import sys
import tempfile
import threading
import types
from pathlib import Path
from typing import Any, NoReturn

#: Imported once in the server, before any fork. Pure imports: none of them runs a torch operation.
PRELOAD = ("torch", "torch.utils.flop_counter", "numpy", "yaml", "pytest")


def preload(scratch: str) -> None:
    """Import :data:`PRELOAD`, then the entry-point plugins (pytest_gpuperf, xdist, pytest_benchmark, ...).

    The plugins are imported by parsing (never configuring) a pytest command line: pytest imports them through
    its assertion-rewriting hook, as it would in the child, so the child's pytest neither rewrites them again
    nor warns that a plugin module was imported before it started. A module that fails to import is left to
    the child.
    """
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    from _pytest.config import _prepareconfig

    try:
        config = _prepareconfig(["-p", "no:cacheprovider", "--noconftest", "-s", "--co", scratch])
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin is the child's to report
        sys.stderr.write(f"fork_server: plugins not preloaded: {exc!r}\n")
        return
    config._ensure_unconfigure()


def threads_now() -> int:
    """The OS threads of this process (``threading`` does not see threads started by C libraries)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    """Write one protocol line."""
    conn.sendall((json.dumps(message) + "\n").encode())


def returncode(status: int) -> int:
    """A ``waitpid`` status as ``Popen.returncode``: the exit code, or minus the signal that killed the child."""
    return os.waitstatus_to_exitcode(status)


def serve(conn: socket.socket, base_path: list[str]) -> dict[str, Any] | None:
    """Answer requests until end of input (returns None); in a forked child, return that child's request."""
    reader = conn.makefile("rb")
    for line in reader:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            reader.close()
            conn.close()
            return request
        send(conn, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        send(conn, {"returncode": returncode(status)})
    return None


def become_fresh_pytest(request: dict[str, Any], base_path: list[str]) -> list[str]:
    """In the child: the process state of ``python -m pytest ARGS`` started in the request's cwd and env."""
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], None), (2, request["stderr"], None)):
        mode = flags if flags is not None else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        opened = os.open(path, mode, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    python_path = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.getcwd(), *[os.path.abspath(p) for p in python_path], *base_path]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    import pytest.__main__ as pytest_main_module

    main = types.ModuleType("__main__")
    main.__file__ = pytest_main_module.__file__
    main.__spec__ = pytest_main_module.__spec__
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    args = list(request["args"])
    sys.argv = [pytest_main_module.__file__, *args]
    sys.orig_argv = [sys.executable, "-m", "pytest", *args]
    return args


#: Where a forked child keeps the host-CPU roofs it measured, for its server's later children (``argv[2]``).
ROOFS_MEMO_ARG = 2


def share_roofs(memo: str) -> None:
    """In the child: host-CPU roofs are measured once per server, by the first child that needs each one.

    A fresh inner run has no pytest cache (``-p no:cacheprovider``), so each one that classifies a step against the
    roofline measured the machine's peak FLOP rate and DRAM and cache bandwidth again: ~1.4 s of CPU, most of an
    inner run. Here the plugin's own measurement (``roofs._torch_roof``) is kept in ``memo`` (a JSON file, one
    server's children run one at a time) under its arguments and the thread count, and read by the next children:
    the same numbers a shared cache would give them. Everything above it (the store, the "calibrated" notes, the
    refresh of a roof a step beat, which uses other arguments) runs as before; other backends measure as before.
    """
    try:
        from pytest_gpuperf.profiling import roofs
    except ImportError:
        return
    measured = getattr(roofs, "_torch_roof", None)
    if measured is None:
        return
    path = Path(memo)

    def remembered(backend: Any, what: str, cls: str, tries: int) -> Any:
        if getattr(backend, "name", None) != "cpu":
            return measured(backend, what, cls, tries)
        import torch

        key = f"{what}/{cls}/{tries}/{torch.get_num_threads()}"
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if key not in known:
            known[key] = measured(backend, what, cls, tries)
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            partial.write_text(json.dumps(known))
            os.replace(partial, path)
        return known[key]

    roofs._torch_roof = remembered


def exit_now(code: int) -> NoReturn:
    """Leave the child as ``pytest_gpuperf.procs.exit.exit_now`` leaves a worker (a copy: this script
    must not depend on the plugin version it serves)."""
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


def main() -> None:
    """``fork_server.py FD [ROOFS_MEMO]``: serve the connected socket FD (children share roofs through ROOFS_MEMO)."""
    conn = socket.socket(fileno=int(sys.argv[1]))
    memo = sys.argv[ROOFS_MEMO_ARG] if len(sys.argv) > ROOFS_MEMO_ARG else ""
    # sys.path[0] is this script's directory, not a fresh run's; PYTHONPATH's entries come from each request.
    from_env = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if os.path.abspath(p) not in from_env]
    scratch = tempfile.mkdtemp(prefix="fork-server-")
    preload(scratch)
    os.rmdir(scratch)
    gc.collect()
    gc.freeze()  # children's collections skip the preloaded heap: no traversal, no copy-on-write of its pages
    if threads_now() > 2:  # the main thread, and OpenBLAS's pool which registers its own fork handlers
        sys.stderr.write(f"fork_server: {threads_now()} threads before forking; inner runs may deadlock\n")
    request = serve(conn, base_path)
    if request is None:
        return
    args = become_fresh_pytest(request, base_path)
    if memo and not os.environ.get("GPUPERF_TEST_REAL_ROOFS"):
        share_roofs(memo)
    import pytest

    exit_now(int(pytest.main(args)))


if __name__ == "__main__":
    main()
