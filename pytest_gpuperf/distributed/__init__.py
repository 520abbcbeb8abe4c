"""pytest-gpuperf's distributed feature: perf tests on N ranks through torchrun's launcher.

* ``@pytest.mark.gpuperf_distributed(world_size=N)``: the test body runs on every rank of
  a reused rank pool (:mod:`.pool`), per-rank metrics come back and are judged here;
* the ``gpuperf_torchrun`` fixture runs a script under ``python -m torch.distributed.run``
  and judges what it reports (:mod:`.script_lines`);
* under an outer ``torchrun``/SLURM launch the body runs in place (:mod:`.inplace`).
"""
