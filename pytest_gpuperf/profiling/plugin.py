"""pytest hooks and fixtures of the profiling feature; imported at start-up, so nothing heavy at module level."""
