"""pytest hooks and fixtures of the vulkan feature; imported at start-up, so nothing heavy at module level."""
