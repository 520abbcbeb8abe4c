"""The plugin is loaded in every pytest run: importing it must not import heavy libraries."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "numpy", "yaml", "wgpu", "matplotlib", "scipy")


def test_importing_the_plugin_does_not_import_torch_or_other_heavy_modules() -> None:
    code = (
        "import sys, pytest_gpuperf.plugin\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_plain_pytest_run_with_the_plugin_installed_does_not_import_torch(tmp_path) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import sys\n"
        "def test_plain():\n"
        f"    assert not [m for m in {HEAVY!r} if m in sys.modules]\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_plain.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "1 passed" in out.stdout, out.stdout + out.stderr
