"""The wheel a user installs: SPDX license, LICENSE file, py.typed, extras, the pytest11 entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout (no build isolation: uses this environment's setuptools)."""
    pytest.importorskip("setuptools", minversion="77")
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")  # a copy: an in-tree build would leave build/ in the checkout
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "pytest_gpuperf", source / "pytest_gpuperf", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True,
        timeout=300,
        cwd=source,
        env={"PIP_NO_INDEX": "1", "PATH": "/usr/bin:/bin"},
    )
    [path] = out.glob("pytest_gpuperf-*.whl")
    return path


@pytest.mark.e2e
def test_wheel_metadata_and_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_text = archive.read(entry_points).decode()
    assert "pytest_gpuperf/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert metadata["License-Expression"] == "MIT"
    assert "xdist" in metadata.get_all("Provides-Extra")
    assert {"vulkan", "plot", "dev"} <= set(metadata.get_all("Provides-Extra"))
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    assert not any(c.startswith("License ::") for c in metadata.get_all("Classifier"))
    assert "[pytest11]" in entry_text and "gpuperf = pytest_gpuperf.plugin" in entry_text
    # one CPU-info package, the one pytest-benchmark requires: py-cpuinfo and py-cpuinfo2 share one cpuinfo/ folder
    requires = [r.split(";")[0].replace(" ", "") for r in metadata.get_all("Requires-Dist")]
    assert not any(r.lower().startswith(("py-cpuinfo", "py_cpuinfo")) for r in requires)
    assert any(r.startswith("pytest-benchmark") for r in requires)
    # no tests, perf tests or baselines inside the wheel
    assert not any(n.startswith(("tests/", "perf_tests/", "baselines/")) for n in names)
