"""pytest-gpuperf reporting feature (being written)."""
