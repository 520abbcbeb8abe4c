"""pytest hooks and fixtures of the distributed feature; imported at start-up, so nothing heavy at module level."""
