"""The plugin is loaded in every pytest run: importing it must not import heavy libraries."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "numpy", "yaml", "wgpu", "matplotlib", "scipy")


@pytest.mark.e2e
def test_importing_the_plugin_does_not_import_torch_or_other_heavy_modules() -> None:
    code = f"import sys, pytest_gpuperf.plugin\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _modules_seen_by_a_plain_test(tmp_path, *extra: str) -> set[str]:
    (tmp_path / "test_plain.py").write_text(
        f"import sys\ndef test_plain():\n    print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *extra, "test_plain.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "1 passed" in out.stdout, out.stdout + out.stderr
    line = next(row for row in out.stdout.splitlines() if "HEAVY=" in row)
    return {m for m in line.split("HEAVY=", 1)[1].strip().split(",") if m}


@pytest.mark.e2e
def test_a_plain_pytest_run_with_the_plugin_installed_does_not_import_torch(tmp_path) -> None:
    """Other installed plugins may import heavy modules; the plugin must add none of its own."""
    with_plugin = _modules_seen_by_a_plain_test(tmp_path)
    without_plugin = _modules_seen_by_a_plain_test(tmp_path, "-p", "no:gpuperf")
    assert with_plugin - without_plugin == set()
