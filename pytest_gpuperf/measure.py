"""The measuring loop: warm-up, adaptive repetitions, device-correct timing, drift reference.

Each *sample* is ``iters`` back-to-back calls of the step timed by the backend
(CUDA events on CUDA; synchronize + host clock elsewhere) divided by ``iters``,
where ``iters`` is chosen so one sample lasts at least ``min_sample_time`` (so
timer resolution and launch jitter do not dominate short steps). Samples are
taken until the 95% confidence half-width of the median is below
``target_precision`` of the median (after at least ``min_samples``), or until
the ``max_time`` budget runs out, which is reported.

When the backend offers a reference workload, one reference sample is taken
right after each step sample; ``normalized`` holds step/reference ratios, which
cancel drift of the machine's speed (see :mod:`pytest_gpuperf.compare`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.base import Backend


@dataclass(frozen=True)
class MeasureConfig:
    """Knobs of the measuring loop (from ini, command line or the test's marker)."""

    warmup_time: float = 0.05
    min_warmup_calls: int = 2
    min_sample_time: float = 0.002
    min_samples: int = 10
    max_samples: int = 200
    max_time: float = 2.0
    target_precision: float = 0.01
    use_reference: bool = True


@dataclass
class TimingResult:
    """What the loop observed: per-step times, drift-normalized ratios and how it got them."""

    samples: list[float]
    normalized: list[float] = field(default_factory=list)
    reference_samples: list[float] = field(default_factory=list)
    iters_per_sample: int = 1
    warmup_calls: int = 0
    elapsed: float = 0.0
    budget_exhausted: bool = False
    precision: float = float("nan")

    @property
    def median(self) -> float:
        """Median seconds per step."""
        return _median(self.samples)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def median_precision(samples: list[float]) -> float:
    """Relative 95% half-width of the median, from order statistics (distribution-free).

    The ranks ``n/2 -+ 1.96 sqrt(n)/2`` bound the median with ~95% confidence.
    """
    n = len(samples)
    if n < 3:
        return float("inf")
    ordered = sorted(samples)
    half = 1.96 * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)))
    med = _median(samples)
    if med <= 0:
        return float("inf")
    return (ordered[hi] - ordered[lo]) / (2.0 * med)


def _calibrate(backend: Backend, fn: Callable[[], object], min_sample_time: float) -> int:
    """Iterations per sample so that one sample lasts at least ``min_sample_time``."""
    iters = 1
    while True:
        elapsed = backend.time_block(fn, iters)
        if elapsed >= min_sample_time or iters >= 1 << 20:
            return iters
        if elapsed <= 0:
            iters *= 10
        else:
            iters = max(iters + 1, int(math.ceil(iters * min_sample_time * 1.2 / elapsed)))


def measure_time(
    backend: Backend,
    step: Callable[[], object],
    config: MeasureConfig,
    reference: Callable[[], object] | None = None,
) -> TimingResult:
    """Warm up, then sample the step (interleaved with ``reference`` when given) adaptively."""
    started = time.perf_counter()
    warmup_calls = 0
    while warmup_calls < config.min_warmup_calls or time.perf_counter() - started < config.warmup_time:
        backend.time_block(step, 1)
        warmup_calls += 1
        if time.perf_counter() - started > config.max_time / 2:
            break
    iters = _calibrate(backend, step, config.min_sample_time)
    ref_iters = 0
    if reference is not None and config.use_reference:
        backend.time_block(reference, 1)
        ref_iters = _calibrate(backend, reference, config.min_sample_time / 2)
    result = TimingResult(samples=[], iters_per_sample=iters, warmup_calls=warmup_calls)
    loop_start = time.perf_counter()
    while True:
        sample = backend.time_block(step, iters) / iters
        result.samples.append(sample)
        if ref_iters:
            ref = backend.time_block(reference, ref_iters) / ref_iters  # type: ignore[arg-type]
            result.reference_samples.append(ref)
            if ref > 0:
                result.normalized.append(sample / ref)
        n = len(result.samples)
        if n >= config.min_samples:
            result.precision = median_precision(result.samples)
            if result.precision <= config.target_precision or n >= config.max_samples:
                break
        if time.perf_counter() - loop_start > config.max_time:
            result.budget_exhausted = n < config.min_samples or result.precision > config.target_precision
            result.precision = median_precision(result.samples)
            break
    result.elapsed = time.perf_counter() - started
    return result
