"""Judging: a run's metrics against their baselines (the measuring pipeline's "judge" stage).

* :mod:`.service`: :class:`~.service.Judging`, one per process: entries, tolerances, verdicts, handed to a sink;
  :mod:`.sources`: the protocol of the baseline sources it reads (the file-backed one lives in ``baselines/``);
  :mod:`.tolerances`: a metric's tolerance from marker and ini;
* :mod:`.sink`: what happens to a test's metrics, chosen once per process: :mod:`.gate` judges them (a normal run),
  :mod:`.collecting` collects them inside a rank (the recorder of ``--gpuperf-update`` is ``baselines.recording``);
* :mod:`.plan`: how one ``measure()`` call times its step (method, stop rule) from the judged metric's entry;
* :mod:`.stop_rule`: when the samples can decide against the baseline;
* :mod:`.compare`: one metric against one entry;
* :mod:`.clock_rule`: a timing verdict decided by cycles per step when the GPU's SM clock moved;
* :mod:`.evidence`: when a verdict is inconclusive instead;
* :mod:`.machine_rule`: another host CPU (its calibration against the baseline's) makes time verdicts inconclusive;
* :mod:`.work`: a step's counted FLOPs/bytes against the baseline's (a changed workload);
* :mod:`.replication`: the verdict from N processes, and the fresh confirmation of a suspect.

Imports run one way: ``baselines/`` may import ``judging/``, never the reverse.
"""
