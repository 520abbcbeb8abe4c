"""pytest-gpuperf vulkan feature (being written)."""
