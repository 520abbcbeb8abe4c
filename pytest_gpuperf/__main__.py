"""``python -m pytest_gpuperf COMMAND``: the ``gpuperf`` command (``history``, ``show``)."""

from pytest_gpuperf.history.cli import main

raise SystemExit(main())
