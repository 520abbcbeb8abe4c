"""The Vulkan backend (through ``wgpu``), all in one package: adapter choice, device, kernels, roofs, plugin.

``pytest_gpuperf.backends.vulkan:VulkanBackend`` is the registry's target; the modules
here import ``wgpu`` and ``numpy`` only inside functions, so importing the package is cheap.
"""

from pytest_gpuperf.backends.vulkan.backend import VulkanBackend

__all__ = ["VulkanBackend"]
