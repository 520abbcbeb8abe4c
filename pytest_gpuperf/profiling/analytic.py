"""The analytic roofline: FLOPs and bytes of a step against the device's measured roofs.

**FLOPs** come from the test's ``flops=`` hint, else from one run of the step under
``torch.utils.flop_counter.FlopCounterMode`` (it counts matmul, convolution and attention;
elementwise ops and norms count 0).

**Bytes** come from the ``bytes_moved=`` hint, else from the same run under a
``TorchDispatchMode`` that adds, for every aten op that is not a view, the bytes of
the tensors it reads and writes (each tensor once per op, at most its storage's size,
so an expanded tensor is not counted per broadcast element). In eager PyTorch one op is
about one kernel that streams its operands through device memory, so this is the
traffic of the unfused step; caches can only make the real DRAM traffic smaller.

**Verdict**: with arithmetic intensity ``AI = FLOPs / bytes`` and the measured peaks
``P`` (FLOP/s) and ``W`` (bytes/s), the roof over the step is ``min(P, AI * W)``; the
ridge point is ``P / W``. The achieved share of the roof equals the larger of the
compute share ``FLOPs / t / P`` and the bandwidth share ``bytes / t / W``. A step is

* **latency-bound** when that share is below ``latency_share`` (default 0.3, see
  :data:`DEFAULT_LATENCY_SHARE`): it approaches neither roof, so launch overhead, sync,
  small grids or host work dominate;
* otherwise **compute-bound** when ``AI >= ridge`` and **memory-bound** when ``AI < ridge``.

The 30% default is half of ncu's 60% rule because the counted FLOPs and bytes are
lower bounds of the work the hardware really does (ops FlopCounterMode does not count,
re-reads the byte count does not see), so the analytic share understates utilisation.

**Hysteresis**: timing noise must not flip a category that fails the test when it
changes. When the baseline holds another class and the step sits within
:data:`HYSTERESIS` (25%) of the boundary between the two classes (the latency
threshold for latency vs the others, the ridge point for compute vs memory), the
baseline's class is kept and the verdict says so; past the band the change is real.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.profiling.verdict import COMPUTE_BOUND, LATENCY_BOUND, MEMORY_BOUND

DEFAULT_LATENCY_SHARE = 0.3
HYSTERESIS = 0.25
#: The band on host-CPU devices (cpu backend, lavapipe), whose speed swings with the neighbours' load.
HOST_CPU_HYSTERESIS = 1.0


@dataclass
class StepCount:
    """FLOPs and bytes of one call of a step, and the dtype that did most of the FLOPs."""

    flops: float
    bytes: float
    dtype: str
    flops_source: str = "FlopCounterMode"
    bytes_source: str = "aten op operands"
    ops: int = 0
    flops_by_dtype: dict[str, float] = field(default_factory=dict)


def _tensor_bytes(tensor: Any) -> int:
    size = tensor.numel() * tensor.element_size()
    try:
        return min(size, tensor.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, meta)
        return size


def _storage_ptr(tensor: Any) -> int | None:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


def _is_alias(func: Any, inputs: list[Any], outputs: list[Any]) -> bool:
    """A view (``t``, ``expand``) or a non-mutating op returning its input's storage (``_unsafe_view``): no traffic."""
    if getattr(func, "is_view", False):
        return True
    schema = getattr(func, "_schema", None)
    if schema is None or schema.is_mutable or not outputs:
        return False
    sources = {_storage_ptr(t) for t in inputs} - {None, 0}
    return all(_storage_ptr(t) in sources for t in outputs)


def _make_byte_counter() -> Any:
    """A ``TorchDispatchMode`` that sums operand bytes per op (built lazily: torch is heavy)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class ByteCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0
            self.ops = 0
            self.matmul_dtypes: dict[str, int] = {}
            self.tensor_dtypes: dict[str, int] = {}

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            inputs = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if _is_alias(func, inputs, outputs):
                return out
            self.ops += 1
            seen: set[int] = set()
            total = 0
            for tensor in inputs + outputs:
                if id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                total += _tensor_bytes(tensor)
            self.bytes += total
            name = str(getattr(func, "__name__", func))
            if inputs and any(k in name for k in ("mm", "matmul", "conv", "attention", "linear", "baddbmm")):
                key = str(inputs[-1].dtype).replace("torch.", "")
                self.matmul_dtypes[key] = self.matmul_dtypes.get(key, 0) + total
            for tensor in inputs:
                if tensor.is_floating_point():
                    key = str(tensor.dtype).replace("torch.", "")
                    self.tensor_dtypes[key] = self.tensor_dtypes.get(key, 0) + _tensor_bytes(tensor)
            return out

    return ByteCounter()


def count_step(step: Callable[[], object], synchronize: Callable[[], None]) -> StepCount:
    """Run ``step`` once under FlopCounterMode and the byte counter; the dtype is the matmuls' (else the data's)."""
    from torch.utils.flop_counter import FlopCounterMode

    flop_mode = FlopCounterMode(display=False)
    byte_mode = _make_byte_counter()
    with flop_mode, byte_mode:
        step()
    synchronize()
    dtypes = byte_mode.matmul_dtypes or byte_mode.tensor_dtypes
    dtype = max(dtypes, key=lambda k: dtypes[k]) if dtypes else "float32"
    return StepCount(
        flops=float(flop_mode.get_total_flops()),
        bytes=float(byte_mode.bytes),
        dtype=dtype,
        ops=byte_mode.ops,
    )


@dataclass(frozen=True)
class Roofline:
    """Where one step sits under the roofs, and its bound class."""

    bound: str
    flops: float
    bytes: float
    seconds: float
    peak_flops: float
    peak_bandwidth: float
    latency_share: float
    kept_from_baseline: bool = False

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (0 without FLOPs; inf with FLOPs but no bytes)."""
        if self.flops <= 0:
            return 0.0
        return self.flops / self.bytes if self.bytes > 0 else math.inf

    @property
    def ridge_point(self) -> float:
        """FLOP/byte where the bandwidth roof meets the compute roof: peak FLOP/s over peak bytes/s."""
        return self.peak_flops / self.peak_bandwidth

    @property
    def achieved_flops(self) -> float:
        """FLOP/s this step reached."""
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def achieved_bandwidth(self) -> float:
        """Bytes/s this step reached."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def compute_share(self) -> float:
        """Achieved FLOP/s over the measured peak."""
        return self.achieved_flops / self.peak_flops

    @property
    def bandwidth_share(self) -> float:
        """Achieved bytes/s over the measured peak."""
        return self.achieved_bandwidth / self.peak_bandwidth

    @property
    def roof_share(self) -> float:
        """Achieved share of the roof at this intensity, ``min(P, AI*W)``; equals max(compute, bandwidth share)."""
        return max(self.compute_share, self.bandwidth_share)

    def explain(self) -> str:
        """One line with the numbers behind the verdict."""
        return (
            f"{self.bound}: AI {self.arithmetic_intensity:.3g} FLOP/B vs ridge {self.ridge_point:.3g} FLOP/B; "
            f"{self.achieved_flops / 1e12:.3g} TFLOP/s of {self.peak_flops / 1e12:.3g} measured "
            f"({self.compute_share:.0%}), {self.achieved_bandwidth / 1e9:.3g} GB/s of "
            f"{self.peak_bandwidth / 1e9:.3g} measured ({self.bandwidth_share:.0%}); roof share "
            f"{self.roof_share:.0%} (latency-bound below {self.latency_share:.0%})"
            + ("; within 25% of the boundary, so the baseline's class is kept" if self.kept_from_baseline else "")
        )

    def as_extra(self) -> dict[str, float | str]:
        """The numbers behind the verdict, for ``Metric.extra`` (JSON-able scalars)."""
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "arithmetic_intensity": self.arithmetic_intensity,
            "ridge_point": self.ridge_point,
            "peak_flops": self.peak_flops,
            "peak_bandwidth": self.peak_bandwidth,
            "compute_share": self.compute_share,
            "bandwidth_share": self.bandwidth_share,
            "roof_share": self.roof_share,
            "latency_share": self.latency_share,
        }


def roofline(
    flops: float,
    bytes_moved: float,
    seconds: float,
    peak_flops: float,
    peak_bandwidth: float,
    latency_share: float = DEFAULT_LATENCY_SHARE,
    baseline_bound: str | None = None,
    hysteresis: float = HYSTERESIS,
) -> Roofline:
    """Classify a step from its FLOPs, bytes and time against measured peaks (see the module docstring).

    ``baseline_bound`` (the class the baseline holds) is kept when the step is within
    the ``hysteresis`` band of the boundary between it and the new class (a factor of
    ``1 + hysteresis`` either side).
    """
    if peak_flops <= 0 or peak_bandwidth <= 0:
        raise ValueError(f"measured peaks must be positive, got {peak_flops} FLOP/s and {peak_bandwidth} B/s")
    probe = Roofline(LATENCY_BOUND, flops, bytes_moved, seconds, peak_flops, peak_bandwidth, latency_share)
    if probe.roof_share < latency_share:
        bound = LATENCY_BOUND
    elif probe.arithmetic_intensity >= probe.ridge_point:
        bound = COMPUTE_BOUND
    else:
        bound = MEMORY_BOUND
    kept = baseline_bound not in (None, bound) and _near_boundary(probe, bound, str(baseline_bound), hysteresis)
    if kept:
        bound = str(baseline_bound)
    return Roofline(bound, flops, bytes_moved, seconds, peak_flops, peak_bandwidth, latency_share, kept)


def _within(value: float, boundary: float, hysteresis: float) -> bool:
    return boundary / (1.0 + hysteresis) <= value <= boundary * (1.0 + hysteresis)


def _near_boundary(probe: Roofline, bound: str, baseline_bound: str, hysteresis: float = HYSTERESIS) -> bool:
    """True when the step is close enough to the boundary between ``bound`` and ``baseline_bound`` to be noise."""
    if baseline_bound not in (COMPUTE_BOUND, MEMORY_BOUND, LATENCY_BOUND):
        return False
    if LATENCY_BOUND in (bound, baseline_bound):
        return _within(probe.roof_share, probe.latency_share, hysteresis)
    return _within(probe.arithmetic_intensity, probe.ridge_point, hysteresis)
