"""pytest-gpuperf distributed feature (being written)."""
