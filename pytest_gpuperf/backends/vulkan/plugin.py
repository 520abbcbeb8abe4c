"""pytest hooks and fixtures of the vulkan feature; imported at start-up, so nothing heavy at module level.

* the ini key ``gpuperf_vulkan_device`` (INDEX, NAME or TYPE) picks the adapter;
  a value that matches none is a usage error listing the adapters wgpu found.
* ``-o gpuperf_vulkan_adapters=true`` prints every adapter with its fingerprint fields and exits.
* Bound verdicts of vulkan steps come from the profiling feature's roofline, like every
  backend's (the Vulkan backend measures its own roofs: ``VulkanBackend.measure_roof``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuperf.settings import add_options, get_option

VULKAN_OPTIONS: list[tuple[Any, ...]] = [
    (
        "gpuperf_vulkan_device",
        "str",
        "",
        "Vulkan/Metal adapter for the vulkan backend: INDEX, NAME substring or TYPE "
        "(DiscreteGPU, IntegratedGPU, CPU); default: the most GPU-like one",
        {"metavar": "DEVICE"},
    ),
    (
        "gpuperf_vulkan_adapters",
        "bool",
        False,
        "list the Vulkan/Metal adapters wgpu finds, then exit (for one run: -o gpuperf_vulkan_adapters=true)",
    ),
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the vulkan feature's ini keys."""
    add_options(parser, VULKAN_OPTIONS, "backends")


def pytest_configure(config: pytest.Config) -> None:
    """Apply ``gpuperf_vulkan_device``."""
    spec = str(get_option(config, "gpuperf_vulkan_device") or "").strip()
    if spec:
        _select_device(spec)


def _select_device(spec: str) -> None:
    """Point the vulkan backend at ``spec``, raising ``pytest.UsageError`` with the adapters when it fails."""
    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.backends.selection import forget_availability

    try:
        import wgpu  # noqa: F401
    except ImportError:
        raise pytest.UsageError(
            f"gpuperf_vulkan_device={spec}: wgpu is not installed; pip install 'pytest-gpuperf[vulkan]'"
        ) from None
    from pytest_gpuperf.backends.vulkan.adapters import AdapterSelectionError

    try:
        get_backend("vulkan").select(spec)  # type: ignore[attr-defined]
    except AdapterSelectionError as exc:
        raise pytest.UsageError(str(exc)) from None
    forget_availability("vulkan")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Return the vulkan backend to its default adapter (in-process runs share the backend instance)."""
    if str(get_option(config, "gpuperf_vulkan_device") or "").strip():
        from pytest_gpuperf.backends import get_backend
        from pytest_gpuperf.backends.selection import forget_availability

        get_backend("vulkan").select("")  # type: ignore[attr-defined]
        forget_availability("vulkan")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``gpuperf_vulkan_adapters``: print the adapters and their fingerprint fields, then exit."""
    if not get_option(config, "gpuperf_vulkan_adapters"):
        return None
    from pytest_gpuperf.backends.vulkan.listing import adapter_lines

    for line in adapter_lines():
        print(line)
    return 0
