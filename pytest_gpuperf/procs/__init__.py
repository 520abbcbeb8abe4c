"""The floor under the features: how the plugin starts a child process, lets a prestarted one run, hands it a task
and reads back its results, and how the child leaves. A/B workers (:mod:`pytest_gpuperf.ab`), ranks and replicas
(:mod:`pytest_gpuperf.distributed`) and the ncu child (:mod:`pytest_gpuperf.profiling`) all use it.

* :mod:`.guard`: the guarded start: nothing a child starts outlives pytest;
* :mod:`.gate`: the gate of a prestarted child (it starts up, then waits for "go" or "stop");
* :mod:`.payload`: the files a child reads its task from and writes its results to (written atomically);
* :mod:`.exit`: the child's exit without the interpreter's module teardown;
* :mod:`.lifetime`: is a process alive, its descendants, its start time, how it ended;
* :mod:`.folders`: private temp folders named for their owner, swept when the owner died;
* :mod:`.cpu_lock`: the file lock that lets one pytest-xdist worker at a time time a step on the host CPU.

Two rules:

* the floor imports nothing from the features (nor from the rest of the package);
* ``exit.py``, ``gate.py``, ``payload.py`` and ``lifetime.py`` import only the standard library (so does this
  ``__init__``): a child may load them by file path, from the running install, whatever version of the
  package its own ``sys.path`` holds (an A/B worker of REF's side imports REF's, which may predate this floor; the
  guard runs isolated with ``python -I``).
"""

from __future__ import annotations

from pathlib import Path

#: This folder: a child that must not import the package loads the standard-library-only modules from here.
FLOOR_DIR = Path(__file__).resolve().parent
