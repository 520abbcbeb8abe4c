"""pytest-xdist workers with one GPU each, as a feature plugin of its own (:mod:`.plugin`, logic in :mod:`.gpus`)."""
