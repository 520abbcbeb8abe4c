"""The backend registry: built-ins, and a third-party backend found through its entry point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_gpuperf.backends import BUILTIN_BACKENDS, ENTRY_POINT_GROUP, get_backend, parse_backend_list
from pytest_gpuperf.backends.base import Backend

TINY_BACKEND = '''
"""A third-party backend: host-clock timing of plain Python steps."""
import time

from pytest_gpuperf.backends.base import Availability, Backend


class TinyBackend(Backend):
    name = "tiny"
    runs_torch = False

    def availability(self):
        return Availability(True, "tiny: always here")

    def device(self):
        return "tiny-device"

    def fingerprint(self):
        return {"backend": "tiny", "device_name": "Tiny Device", "arch": "t1", "memory_gib": 1}

    def synchronize(self):
        pass

    def time_block(self, step, iters):
        start = time.perf_counter()
        for _ in range(iters):
            step()
        return time.perf_counter() - start

    def measure_peak_memory(self, step):
        step()
        return 1024
'''


def _install_tiny_backend(root: Path) -> Path:
    """Write a package and its ``.dist-info`` (with the entry point) into ``root``, as pip would."""
    site = root / "site"
    (site / "tinybackend").mkdir(parents=True)
    (site / "tinybackend" / "__init__.py").write_text(TINY_BACKEND)
    dist = site / "tinybackend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinybackend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntiny = tinybackend:TinyBackend\n")
    return site


def test_builtin_backends_are_registered_in_preference_order() -> None:
    assert list(BUILTIN_BACKENDS) == ["cuda", "mps", "vulkan", "cpu"]
    for name in BUILTIN_BACKENDS:
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
    assert get_backend("vulkan").runs_torch is False


def test_parse_backend_list_names_the_unknown_ones_and_lists_the_known() -> None:
    assert parse_backend_list(" CUDA, vulkan ") == ["cuda", "vulkan"]
    with pytest.raises(ValueError, match=r"unknown backend 'metal', 'rocm'; known backends: cuda, mps, vulkan, cpu"):
        parse_backend_list("metal,cpu,rocm")


def test_third_party_backend_from_an_entry_point_runs_marked_tests(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _install_tiny_backend(tmp_path)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf_backends("tiny", "cpu")
        def test_step(gpuperf):
            assert gpuperf.device == "tiny-device" or gpuperf.backend_name == "cpu"
            gpuperf.measure(lambda: sum(range(1000)), items=1000)
        """
    )
    env_path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", env_path)
    result = pytester.runpytest_subprocess(
        "-v", "--gpuperf", "--gpuperf-backend", "tiny", "-o", "gpuperf_max_time=0.2", "-p", "no:cacheprovider"
    )
    result.stdout.fnmatch_lines(["*test_step[[]tiny[]] PASSED*", "*test_step[[]tiny[]]*[[]Tiny Device[]]*"])
    result.assert_outcomes(passed=1)

    listing = pytester.runpytest_subprocess("--gpuperf-backend", "nosuch", "-p", "no:cacheprovider")
    assert listing.ret == pytest.ExitCode.USAGE_ERROR
    listing.stderr.fnmatch_lines(["*known backends: cuda, mps, vulkan, cpu, tiny*"])
