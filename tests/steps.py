"""Step sources shared by end-to-end tests (each inner test file is made with ``pytester.makepyfile``)."""

#: A deterministic 64x64 matmul chain whose ``WORK`` is filled in with ``.format(work=N)``: N times the work of one
#: matmul, while the declared work stays one matmul's (so N > 1 is the same work getting N times slower).
MATMUL_CHAIN = """
import torch

WORK = {work}

def test_step(gpuperf):
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))

    def step():
        out = a
        for _ in range(WORK):
            out = torch.tanh(out @ a)
        return out

    # The declared work stays that of one matmul: more WORK is the same declared work getting slower (a changed
    # count would be reported as a changed workload instead, pytest_gpuperf.judging.work).
    gpuperf.measure(step, memory=False, flops=2 * 64**3, bytes_moved=3 * 64 * 64 * 4)
"""
