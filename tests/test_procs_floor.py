"""The worker protocol's floor (``pytest_gpuperf/procs``): it imports nothing above it, and the files a child loads by
path (an A/B worker of REF's side, the isolated guard) need only the standard library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from pytest_gpuperf.procs import FLOOR_DIR

STANDALONE = ("exit", "gate", "payload", "lifetime")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_floor_imports_nothing_from_the_features() -> None:
    for path in FLOOR_DIR.glob("*.py"):
        package = {name for name in _imports(path) if name.partition(".")[0] == "pytest_gpuperf"}
        assert all(name.startswith("pytest_gpuperf.procs") for name in package), (path.name, package)


def test_the_standalone_files_load_by_path_in_an_isolated_interpreter(tmp_path: Path) -> None:
    """``python -I`` with no package on ``sys.path``: what an A/B worker of an older REF finds."""
    program = (
        "import importlib.util, sys\n"
        "for name in sys.argv[2:]:\n"
        "    spec = importlib.util.spec_from_file_location('_floor_' + name, sys.argv[1] + '/' + name + '.py')\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print('pytest_gpuperf' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", program, str(FLOOR_DIR), *STANDALONE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_file_gate_says_go_or_stop(tmp_path: Path) -> None:
    import os

    from pytest_gpuperf.procs.gate import GO, STOP, FileGate, wait_on_file

    gate = FileGate(tmp_path / "gate")
    gate.open(GO)
    assert wait_on_file(gate.path, os.getpid()) is True
    gate.open(STOP)
    assert wait_on_file(gate.path, os.getpid()) is False


def test_a_payload_round_trips_and_leaves_no_partial_file(tmp_path: Path) -> None:
    from pytest_gpuperf.procs.payload import read_json, write_json

    write_json(tmp_path / "out.json", {"tests": ["a"], "seconds": 1.5})
    assert read_json(tmp_path / "out.json") == {"tests": ["a"], "seconds": 1.5}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
