"""pytest-gpuperf profiling feature (being written)."""
