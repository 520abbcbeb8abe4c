"""Human-readable lines describing every adapter wgpu finds (``gpuperf_vulkan_adapters``)."""

from __future__ import annotations


def adapter_lines() -> list[str]:
    """One line per Vulkan/Metal adapter (index, name, type, driver, timestamps, cooperative matrix), then others."""
    try:
        import wgpu  # noqa: F401
    except ImportError as exc:
        return [f"wgpu is not importable ({exc}); pip install 'pytest-gpuperf[vulkan]'"]
    from pytest_gpuperf.backends.vulkan.adapters import native_adapters, other_adapters
    from pytest_gpuperf.backends.vulkan.probe import find_physical_device

    lines = []
    for info, _ in native_adapters():
        physical = find_physical_device(info.name, info.vendor_id, info.device_id)
        coop = "unknown"
        if physical is not None:
            coop = "yes" if "VK_KHR_cooperative_matrix" in physical.extensions else "no"
        lines.append(f"{info.describe()} | driver {info.driver or '?'} | VK_KHR_cooperative_matrix: {coop}")
    if not lines:
        lines.append("no Vulkan or Metal adapter found")
    lines.extend(f"(not used) {other}" for other in other_adapters())
    return lines
