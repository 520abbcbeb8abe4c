"""One ``gpuperf.measure()`` call as a chain of values, each stage computed once and handed to the next.

* :mod:`.plan`: the frozen :class:`~.plan.MeasurePlan` (the call's arguments, the judged metric and its kind,
  its baseline entry and tolerance, the stop rule, the loop's settings, the host calibration);
* :mod:`.probes`: the step's extra calls outside the timed samples, each made once (warm call, peak memory,
  one host-sync check that also decides the CUDA graph capture);
* :mod:`.pipeline`: time (:mod:`pytest_gpuperf.timing`) -> metrics -> count (``pytest_gpuperf_after_measure``)
  -> sink (the judging service: judge, confirm, store). A confirmation times the step again with the same plan.

:class:`pytest_gpuperf.fixture.GpuPerf` runs the chain; nothing here imports pytest.
"""
