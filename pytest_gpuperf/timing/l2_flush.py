"""Cold-cache timing: write a buffer larger than the last-level cache before each timed call.

Steps that re-read the same small tensors run from L2 (GPU) or L3 (CPU) after
the first call, which flatters them against a real model where other work
evicts the cache between calls. With ``gpuperf_l2_flush`` each call is
preceded by a write of a buffer twice the cache size and timed on its own; on
CUDA the flush kernel is still running when the step is launched, so the step's
start event does not include the launch gap. :class:`L2FlushSampler` wraps another sampler's clock that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.timing.record import Samples
from pytest_gpuperf.timing.warmup import iters_for

if TYPE_CHECKING:
    from pytest_gpuperf.timing.record import Instrument
    from pytest_gpuperf.timing.samplers import Sampler, TimeBlock
    from pytest_gpuperf.timing.sampling import MeasureConfig, SamplingPlan
    from pytest_gpuperf.timing.warmup import WarmupResult

#: Fallback cache size when the device does not report one.
DEFAULT_CACHE_BYTES = 64 * 2**20


def cache_bytes(device: Any) -> int:
    """The last-level cache size of ``device`` in bytes (CUDA: L2; CPU: the largest /sys cache index)."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        size = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        return size or DEFAULT_CACHE_BYTES
    from pathlib import Path

    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else DEFAULT_CACHE_BYTES


class L2Flusher:
    """Writes a buffer of twice the cache size on the step's device (a new value each time)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.nbytes = 2 * cache_bytes(device)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.float32, device=device)
        self._value = 0.0

    def __call__(self) -> None:
        """Overwrite the whole buffer (queued on the device's stream; not waited for)."""
        self._value = self._value % 1000.0 + 1.0
        self.buffer.fill_(self._value)


def time_flushed(
    time_block: Callable[[Callable[[], object], int], float],
    step: Callable[[], object],
    iters: int,
    flush: Callable[[], None],
) -> float:
    """Seconds of ``iters`` calls of ``step``, each after a cache flush and timed alone (flush excluded).

    ``time_block`` is the loop's clock (a backend's ``time_block`` or the CPU thread clock).
    """
    total = 0.0
    for _ in range(iters):
        flush()
        total += time_block(step, 1)
    return total


class L2FlushSampler:
    """``inner``'s clock, each call after a cache flush on ``device()`` and timed alone (``method`` ``l2_flush``).

    ``time_block`` (the backend's) times one flush, so that a sample's calls are sized by call and flush together.
    """

    method = "l2_flush"

    def __init__(self, inner: Sampler, device: Callable[[], Any], time_block: TimeBlock) -> None:
        self.inner, self.device, self.time_block = inner, device, time_block
        self.cpu_now = inner.cpu_now

    def time_calls(self, step: Callable[[], object], iters: int) -> float:
        """Seconds of ``iters`` calls by the inner sampler's clock (the warm-up does not flush)."""
        return self.inner.time_calls(step, iters)

    def warmup_seconds(self, config: MeasureConfig) -> float:
        """The inner sampler's."""
        return self.inner.warmup_seconds(config)

    def settle(self, warm: WarmupResult, config: MeasureConfig) -> tuple[Sampler, float, str]:
        """The inner sampler's choice of clock, still flushed."""
        inner, per_call, note = self.inner.settle(warm, config)
        return L2FlushSampler(inner, self.device, self.time_block), per_call, note

    def instruments(self) -> Sequence[Instrument]:
        """None: the flushed calls are timed as they are."""
        return []

    def sample(self, step: Callable[[], object], plan: SamplingPlan) -> Samples:
        """Samples of flushed calls, each timed by the inner sampler's clock."""
        flusher = L2Flusher(self.device())
        flusher()
        flush_seconds = self.time_block(flusher, 1)  # each flushed call costs its flush too: size samples by both
        iters = iters_for(
            plan.per_call + flush_seconds, plan.warm.wall_per_call + flush_seconds, plan.config.min_sample_time
        )
        clock = self.inner.time_calls
        taken = Samples(method=self.method, iters_per_sample=iters)
        plan.sample(lambda: time_flushed(clock, step, iters, flusher) / iters, taken)
        return taken
