"""A/B against a git ref (``--gpuperf-ab REF``): REF's code and the working tree's, measured interleaved.

REF is checked out into a temporary git worktree (:mod:`.gitref`); each perf test present on both
sides runs in worker processes of each side, alternating A (REF) and B (working tree) rounds
(:mod:`.runner`, :mod:`.worker_plugin`); the paired results are judged with three outcomes
(:mod:`.judge`) and reported (:mod:`.report`). Hooks live in :mod:`.plugin`.
"""
