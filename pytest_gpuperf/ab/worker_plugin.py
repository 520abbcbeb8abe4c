"""pytest plugin of an A/B worker process (``python -c "...; _gpuperf_ab_worker.main(ARGS)" ... -p
_gpuperf_ab_worker --gpuperf``: :func:`main` runs pytest and leaves without the interpreter's module teardown).
PYTEST_DONT_REWRITE: :func:`main` imports this module before pytest's ``-p`` would mark it for assertion rewriting.

Self-contained on purpose: it is copied next to the worker as ``_gpuperf_ab_worker.py`` and must
load whatever version of pytest-gpuperf the A side (REF) imports, so it only reads the
``report.gpuperf`` payload every version attaches. The one rule for what it shares with the package: the worker
protocol's floor (:mod:`pytest_gpuperf.procs`: the gate, the payload files, the exit) is loaded by file path from
the folder ``GPUPERF_AB_FLOOR`` names, the running (HEAD) install's ``procs/``, never imported from the side's
package (REF's may predate it); those files import only the standard library. Environment:

* ``GPUPERF_AB_SELECT``: JSON file with the node ids to run (perf tests outside it are deselected);
* ``GPUPERF_AB_OUT``: where to write the results (JSON, written atomically at session end);
* ``GPUPERF_AB_FOREIGN_ROOT`` / ``GPUPERF_AB_SIDE_ROOT``: modules imported from the foreign root
  (the working tree, on the A side) and not from this side's root are reported as leaks, and so are
  the project's own packages (``GPUPERF_AB_PACKAGES``, comma-separated) imported from anywhere but
  this side's root (an installed copy in site-packages, say).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

#: The folder of the floor's standard-library-only modules (HEAD's ``pytest_gpuperf/procs``).
FLOOR_ENV = "GPUPERF_AB_FLOOR"


def _floor(name: str) -> ModuleType:
    """The floor's module ``name``, loaded by path from :data:`FLOOR_ENV` (else this file's package, when it is
    imported as ``pytest_gpuperf.ab.worker_plugin``); kept out of ``sys.modules``, so no leak check sees it."""
    folder = os.environ.get(FLOOR_ENV) or str(Path(__file__).resolve().parent.parent / "procs")
    spec = importlib.util.spec_from_file_location(f"_gpuperf_floor_{name}", Path(folder) / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gate, _payload = _floor("gate"), _floor("payload")
_STATE: dict[str, Any] = {"collected": [], "tests": {}, "leaks": [], "collect_errors": {}, "started": time.time()}
#: ``GPUPERF_AB_GATE`` set: the runner started this worker ahead of its turn. It waits after collecting on the
#: gate, its stdin ("go": run the tests the select file names; anything else: exit) and prints ``GPUPERF_AB_DONE``
#: once its results are written. pytest's capture replaces fds 0 and 1 while it collects and runs, so both are
#: duplicated now, when ``-p`` imports this plugin, before capturing starts.
GATED = bool(os.environ.get("GPUPERF_AB_GATE"))
_GATE_IN = _gate.hold_stdin() if GATED else -1
_DONE_OUT = os.dup(1) if GATED else -1


def _pay_start_up_costs() -> None:
    """Pay the first test's one-time costs before saying ready: the CUDA context, and what this side's plugin
    lists (:mod:`pytest_gpuperf.ab.prewarm`, absent in older versions: then only the context)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_available():
            torch.empty(1, device="cuda")
    except Exception:  # noqa: BLE001 - a failing CUDA start shows up again in the test itself, with its reason
        return
    try:
        from pytest_gpuperf.ab.prewarm import prewarm
    except ImportError:
        return
    _STATE["prewarm_failed"] = prewarm()


def _wait_for_turn() -> bool:
    """Block until the runner says go (True) or to exit (False, also when the runner went away)."""
    _pay_start_up_costs()
    os.write(_DONE_OUT, b"\nGPUPERF_AB_READY\n")  # started up: the runner lets the first worker measure then
    return bool(_gate.wait_on_pipe(_GATE_IN))


_RAISED: set[tuple[str, str]] = set()
PERF_FIXTURES = ("gpuperf", "gpuperf_torchrun")


def _is_perf(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in PERF_FIXTURES)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the selected perf tests; remember every perf test this side has (after -k/-m)."""
    perf = [item for item in items if _is_perf(item)]
    _STATE["collected"] = [item.nodeid for item in perf]
    if GATED and not _wait_for_turn():
        items[:] = []
        _STATE["stopped"] = True
        pytest.exit("A/B worker not needed: the verdicts were decided without it", returncode=0)
    select_file = os.environ.get("GPUPERF_AB_SELECT")
    selected = set(_payload.read_json(Path(select_file))) if select_file else set()
    keep = [item for item in perf if item.nodeid in selected]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Keep collection errors: a test file that fails to import on this side is not a missing test."""
    if report.failed:
        _STATE["collect_errors"][report.nodeid] = report.longreprtext[-4000:]


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Note phases that raised: a failure there is the test's own error, not a perf verdict."""
    if call.excinfo is not None and call.when in ("setup", "call"):
        _RAISED.add((item.nodeid, call.when))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep each test's outcome, its own error text and its perf payload."""
    entry = _STATE["tests"].setdefault(report.nodeid, {"outcome": "not run", "error": None, "payload": None})
    if report.when == "call" or (report.when == "setup" and not report.passed):
        entry["outcome"] = report.outcome
        entry["duration"] = report.duration
    if report.skipped and isinstance(report.longrepr, tuple):
        entry["skip"] = str(report.longrepr[2])
    if report.failed and (report.nodeid, report.when) in _RAISED:
        entry["error"] = report.longreprtext[-4000:]
    payload = getattr(report, "gpuperf", None)
    if report.when == "call" and payload:
        entry["payload"] = payload


def _environment_roots() -> list[Path]:
    """Where this interpreter's own packages live (the venv, site-packages, the standard library).

    A venv may sit inside the working tree (``scripts/bootstrap.sh`` makes ``.venv/`` there): its packages are the
    environment's, shared by both sides, not the project's code.
    """
    import site
    import sysconfig

    found = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    paths = sysconfig.get_paths()
    found.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key))
    try:
        found.update(site.getsitepackages())
        found.add(site.getusersitepackages())
    except AttributeError:  # an interpreter without site's helpers (an old virtualenv's site.py)
        pass
    return sorted({Path(p).resolve() for p in found if p})


def _leaks(environment: list[Path] | None = None) -> list[str]:
    """Modules this side imported from the other side's tree, and project packages from anywhere but its own."""
    foreign = os.environ.get("GPUPERF_AB_FOREIGN_ROOT")
    own = os.environ.get("GPUPERF_AB_SIDE_ROOT")
    packages = {p for p in os.environ.get("GPUPERF_AB_PACKAGES", "").split(",") if p}
    foreign_root = Path(foreign).resolve() if foreign else None
    own_root = Path(own).resolve() if own else None
    shared = _environment_roots() if environment is None else [Path(p).resolve() for p in environment]
    # only roots inside the foreign tree matter, and never the tree itself
    shared = [p for p in shared if foreign_root is not None and p != foreign_root and p.is_relative_to(foreign_root)]
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or name == __name__:
            continue
        resolved = Path(path).resolve()
        mine = own_root is not None and resolved.is_relative_to(own_root)
        from_foreign = foreign_root is not None and resolved.is_relative_to(foreign_root)
        if from_foreign and any(resolved.is_relative_to(root) for root in shared):
            from_foreign = False  # the environment's own package (a venv inside the working tree)
        if not mine and (from_foreign or name.partition(".")[0] in packages):
            found.append(f"{name} ({resolved})")
    return sorted(found)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the results file (atomically: a reader never sees half of it)."""
    out = os.environ.get("GPUPERF_AB_OUT")
    if not out or _STATE.get("stopped"):
        return
    _STATE["leaks"] = _leaks()
    _STATE["seconds"] = time.time() - _STATE["started"]
    _STATE["pid"] = os.getpid()
    _payload.write_json(Path(out), _STATE)
    if GATED:
        os.write(_DONE_OUT, b"\nGPUPERF_AB_DONE\n")  # the runner goes on; this process may take a while to exit


def main(args: list[str]) -> NoReturn:
    """The worker process: ``pytest.main(args)``, then the floor's exit (no module teardown; the results are
    written and said done before)."""
    if sys.path and sys.path[0] == "":
        sys.path[0] = os.getcwd()  # what ``python -m pytest`` puts first
    code = int(pytest.main(args))
    _floor("exit").exit_now(code)
    raise AssertionError("exit_now returned")  # pragma: no cover
