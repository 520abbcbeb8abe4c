"""History across commits from the repository alone: ``gpuperf history`` (series, change points, creep)."""
