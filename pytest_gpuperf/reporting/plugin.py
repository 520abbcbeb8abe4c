"""pytest hooks and fixtures of the reporting feature; imported at start-up, so nothing heavy at module level."""
