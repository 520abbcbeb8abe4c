"""One count of a step's FLOPs and bytes: what each aten op really reads and writes.

The step runs once under two dispatch modes at the same time: torch's
``FlopCounterMode`` (matmul, convolution, attention) and
:class:`~pytest_gpuperf.profiling.op_traffic.OpTraffic`, which adds up, op by op, the
bytes it reads and writes (its module says how each kind of op is counted). Causal
attention's FLOPs are corrected to the unmasked pairs, and CPU attention, which
FlopCounterMode does not know, is counted with the same formula.

The **working set** is the bytes of the distinct storages the step touched: a step
whose working set fits in the last-level cache is judged against the cache roof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StepCount:
    """FLOPs, bytes and working set of one call of a step, and the dtype that did most of the FLOPs."""

    flops: float
    bytes: float
    dtype: str
    flops_source: str = "FlopCounterMode"
    bytes_source: str = "aten op reads + writes"
    ops: int = 0
    working_set: float = 0.0
    bytes_by_op: dict[str, float] = field(default_factory=dict)
    causal_flops_removed: float = 0.0


@contextmanager
def without_dynamo_import(mode_classes: Sequence[type]) -> Iterator[None]:
    """Run dispatch modes without their first dispatch importing ``torch._dynamo`` (1.7-7 s of a first test).

    torch wraps every ``TorchDispatchMode.__torch_dispatch__`` in ``torch._disable_dynamo``, which imports
    ``torch._dynamo`` (and inductor) at the first dispatch only to tell dynamo not to trace the mode. When dynamo
    was never imported, nothing is being compiled: the wrapper is told that its disabled function is the plain
    one for the duration of the count, and told nothing afterwards. When dynamo is loaded, nothing changes.
    """
    import sys

    marked = []
    if "torch._dynamo" not in sys.modules:
        for cls in mode_classes:
            for klass in cls.__mro__:
                raw = getattr(klass.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
                if raw is not None and getattr(raw, "__dynamo_disable", None) is None:
                    raw.__dynamo_disable = raw
                    marked.append(raw)
    try:
        yield
    finally:
        for raw in marked:
            if getattr(raw, "__dynamo_disable", None) is raw:
                del raw.__dynamo_disable


def count_step(step: Callable[[], object], synchronize: Callable[[], None]) -> StepCount:
    """Run ``step`` once under FlopCounterMode and ``OpTraffic``: one count of its FLOPs and bytes."""
    from torch.utils import flop_counter

    from pytest_gpuperf.profiling.op_traffic import OpTraffic

    flop_mode = flop_counter.FlopCounterMode(display=False)
    traffic = OpTraffic()
    inner = getattr(flop_counter, "_FlopCounterMode", None)
    with without_dynamo_import([type(traffic), *([inner] if isinstance(inner, type) else [])]):
        with flop_mode, traffic:
            step()
    synchronize()
    dtypes = traffic.matmul_dtypes or traffic.tensor_dtypes
    dtype = max(dtypes, key=lambda k: dtypes[k]) if dtypes else "float32"
    flops = float(flop_mode.get_total_flops()) - traffic.causal_removed + traffic.extra_flops
    return StepCount(
        flops=max(flops, 0.0),
        bytes=float(traffic.bytes),
        dtype=dtype,
        ops=traffic.ops,
        working_set=float(sum(traffic.storages.values())),
        bytes_by_op=dict(traffic.by_op),
        causal_flops_removed=float(traffic.causal_removed),
    )
