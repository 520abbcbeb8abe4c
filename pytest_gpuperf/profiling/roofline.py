"""The roofline: the bound vocabulary, the roofs of a device, and the classification of a step.

This is the one place that decides whether a step is memory-, compute-, latency- or
host-bound, for every backend (torch devices and Vulkan alike). Light: no torch here.

**Vocabulary** (stored in baselines, accepted by ``@pytest.mark.gpuperf(bound=...)``):
``memory-bound``, ``compute-bound``, ``latency-bound``, ``host-bound``
(:func:`normalize_bound` also takes ``"memory"``, ``"Compute_Bound"`` ...).

**Roofs** (:class:`Roofs`) are measured by each backend, never from a datasheet: a peak
FLOP/s, the DRAM bandwidth, and, where measured, the last-level cache's bandwidth and
size (GPU L2, CPU LLC).

**Classification** (:func:`classify`) of a step with ``F`` FLOPs and ``B`` bytes in
``t`` seconds:

1. **host-bound** when the device was busy for less than :data:`HOST_BUSY_SHARE` of an
   eager step (device time over eager time, where the timing loop measured both): the
   host cannot keep the device fed; CUDA graphs or ``torch.compile`` are the remedy;
2. the bandwidth roof is the cache's when the step's working set fits in the last-level
   cache (and the timing did not flush it), else DRAM's; with ``AI = F / B`` the roof
   over the step is ``min(P, AI * W)`` and its share is ``max(F/t/P, B/t/W)``;
3. **latency-bound** when that share is below ``latency_share``: by default
   :data:`DEFAULT_LATENCY_SHARE` (66%) on GPUs, :data:`HOST_CPU_LATENCY_SHARE` (30%) on
   host-CPU devices (:func:`default_latency_share`). The GPU line is ncu's rule (SM and
   memory both below 60% of *peak*) moved onto our *measured* roofs: ncu's DRAM peak sits
   above the best-pattern DRAM roof we measure, so 60% of ncu's peak is about 66% of ours
   (the calibration against ncu: docs/roofline.md, docs/PERFORMANCE.md). The host-CPU line
   stays at 30%: there is no ncu to calibrate it against, and a CPU's speed swings with its
   neighbours' load;
4. otherwise **compute-bound** when ``AI >= P / W`` (the ridge), else **memory-bound**.

A share above 100% is impossible: the report flags it as a **counting error** (the
counted FLOPs or bytes exceed what the device can do), never as a measurement; the
caller re-measures the roof first (a roof measured during a busy moment is too low).

**Hysteresis**: when the baseline holds another class and the step sits within
``hysteresis`` (25%; a factor of 2 on host-CPU devices) of the boundary between the two
(the host-busy line, the latency line, or the ridge), the baseline's class is kept and
the explanation says so; past the band the change is real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"
LATENCY_BOUND = "latency-bound"
HOST_BOUND = "host-bound"
BOUNDS = (MEMORY_BOUND, COMPUTE_BOUND, LATENCY_BOUND, HOST_BOUND)

#: The latency line on GPUs: ncu's 60%-of-peak rule on our measured roofs (see the module docstring).
DEFAULT_LATENCY_SHARE = 0.66
#: The latency line on host-CPU devices (cpu backend, lavapipe): not calibrated against ncu.
HOST_CPU_LATENCY_SHARE = 0.3
#: Host-bound below this share of device-busy time in an eager step.
HOST_BUSY_SHARE = 0.5
HYSTERESIS = 0.25
#: The band on host-CPU devices (cpu backend, lavapipe), whose speed swings with the neighbours' load.
HOST_CPU_HYSTERESIS = 1.0
DRAM = "DRAM"
#: Shares up to this much over 100% are a step running at its roof (the roof's own calibration noise).
AT_ROOF_NOISE = 0.05


def default_latency_share(host_cpu: bool) -> float:
    """The latency line of a device: :data:`HOST_CPU_LATENCY_SHARE` on host CPUs, else :data:`DEFAULT_LATENCY_SHARE`."""
    return HOST_CPU_LATENCY_SHARE if host_cpu else DEFAULT_LATENCY_SHARE


def normalize_bound(value: object, where: str = "@pytest.mark.gpuperf(bound=...)") -> str:
    """``"compute"`` / ``"compute-bound"`` / ``"Compute_Bound"`` -> ``"compute-bound"``; ValueError otherwise."""
    text = str(value).strip().lower().replace("_", "-").replace(" ", "-")
    if not text.endswith("-bound"):
        text += "-bound"
    if text not in BOUNDS:
        raise ValueError(f"{where}: bound={value!r} is not one of 'memory', 'compute', 'latency', 'host'")
    return text


@dataclass(frozen=True)
class Roofs:
    """Measured roofs of one device: peak FLOP/s (one dtype class), DRAM and cache bandwidth (B/s)."""

    peak_flops: float
    bandwidth: float
    dtype_class: str = "float32"
    key: str = ""
    cache_bandwidth: float | None = None
    cache_bytes: float | None = None
    cache_name: str = "LLC"

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/B) where the DRAM roof meets the compute roof."""
        return self.peak_flops / self.bandwidth

    def level_for(self, working_set: float | None, cold: bool = False) -> tuple[str, float]:
        """The memory level a step of ``working_set`` bytes streams from, and that level's bandwidth."""
        if (
            not cold
            and working_set
            and self.cache_bandwidth
            and self.cache_bytes
            and self.cache_bandwidth > self.bandwidth
            and working_set <= self.cache_bytes
        ):
            return self.cache_name, self.cache_bandwidth
        return DRAM, self.bandwidth


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
    level: str = DRAM
    working_set: float = 0.0
    device_busy: float | None = None
    kept_from_baseline: bool = False
    hysteresis: float = HYSTERESIS
    #: The FLOPs come from FlopCounterMode, which counts matmul/conv/attention exactly and never more than ran:
    #: a compute share over 100% then means the roof reads low, not that the count is wrong.
    exact_flops: bool = False

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (0 without FLOPs; inf with FLOPs but no bytes)."""
        if self.flops <= 0:
            return 0.0
        return self.flops / self.bytes if self.bytes > 0 else math.inf

    @property
    def ridge_point(self) -> float:
        """FLOP/byte where this step's bandwidth roof meets the compute roof."""
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
        """Achieved bytes/s over the measured bandwidth of the step's memory level."""
        return self.achieved_bandwidth / self.peak_bandwidth

    @property
    def roof_share(self) -> float:
        """Achieved share of the roof at this intensity, ``min(P, AI*W)``; equals max(compute, bandwidth share)."""
        return max(self.compute_share, self.bandwidth_share)

    @property
    def over_roof(self) -> bool:
        """True when the step claims more than its roof allows: the counted work is wrong, not the device."""
        return self.roof_share > 1.0

    def roof_reads_low(self) -> bool:
        """True when the share over 100% is on the side counted exactly (FLOPs by FlopCounterMode): the roof is low."""
        return self.over_roof and self.exact_flops and self.compute_share >= self.bandwidth_share

    def over_roof_word(self) -> str:
        """The roof share's value when over 100%: which of the two it is (never a number)."""
        return "above the measured roof (>100%)" if self.roof_reads_low() else "counting error (>100%)"

    def counting_error(self) -> str:
        """Why a share above 100% cannot be a measurement ('' when the share is possible)."""
        if not self.over_roof:
            return ""
        side = "FLOPs" if self.compute_share >= self.bandwidth_share else "bytes"
        if self.roof_reads_low():
            return (
                f"above the measured roof: the counted FLOPs give {self.roof_share:.0%} of the measured compute roof; "
                "FlopCounterMode counts this step's FLOPs exactly (never more than ran), so the roof reads low: it "
                "was measured while the machine was busier than during the step, or the step takes a faster path "
                "than the roof's probe (measure the roofs again on a quiet machine: -o gpuperf_recalibrate=true)"
            )
        if self.roof_share <= 1.0 + AT_ROOF_NOISE:
            return (
                f"counting error within the roof's noise: the counted {side} give {self.roof_share:.0%} of the "
                f"measured {self.level} roof; the step runs at its roof, and the roof (measured again after this "
                f"step beat it) reads up to {AT_ROOF_NOISE:.0%} low"
            )
        return (
            f"counting error: the counted {side} give {self.roof_share:.0%} of the measured {self.level} roof, "
            f"which no device reaches: the {side} counted for this step exceed what it really does (pass "
            f"measure({'flops' if side == 'FLOPs' else 'bytes_moved'}=...) with the true figure), or the roof, "
            "measured again after this step beat it, was measured while the machine was busier than during the step"
        )

    def explain(self) -> str:
        """One line with the numbers behind the verdict (a share above 100% is named for what it is)."""
        share = "over 100%, not shown" if self.over_roof else f"{self.roof_share:.0%}"
        text = (
            f"{self.bound}: AI {self.arithmetic_intensity:.3g} FLOP/B vs ridge {self.ridge_point:.3g} FLOP/B "
            f"({self.level} roof); {self.achieved_flops / 1e12:.3g} TFLOP/s of {self.peak_flops / 1e12:.3g} measured"
            f", {self.achieved_bandwidth / 1e9:.3g} GB/s of {self.peak_bandwidth / 1e9:.3g} measured; "
            f"roof share {share} (latency-bound below {self.latency_share:.0%})"
        )
        if self.flops <= 0:  # an elementwise step: its FLOP rate and intensity read 0 because nothing was counted
            text += (
                "; no FLOPs counted (FlopCounterMode counts matmul/conv/attention only): the class rests on the "
                "bytes; pass measure(flops=...) to count elementwise math"
            )
        if self.device_busy is not None:
            text += f"; device busy {self.device_busy:.0%} of an eager step (host-bound below {HOST_BUSY_SHARE:.0%})"
        if self.over_roof:
            text += "; " + self.counting_error()
        if self.kept_from_baseline:
            text += f"; within {self.hysteresis:.0%} of the boundary, so the baseline's class is kept"
        return text

    def as_extra(self) -> dict[str, float | str | bool]:
        """The numbers behind the verdict, for ``Metric.extra`` (JSON-able scalars)."""
        extra: dict[str, float | str | bool] = {
            "flops": self.flops,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "arithmetic_intensity": self.arithmetic_intensity,
            "ridge_point": self.ridge_point,
            "peak_flops": self.peak_flops,
            "peak_bandwidth": self.peak_bandwidth,
            "roof_level": self.level,
            "working_set": self.working_set,
            "compute_share": self.compute_share,
            "bandwidth_share": self.bandwidth_share,
            "roof_share": self.roof_share,
            "latency_share": self.latency_share,
            "over_roof": self.over_roof,
        }
        if self.device_busy is not None:
            extra["device_busy"] = self.device_busy
        if self.over_roof:
            extra["counting_error"] = self.counting_error()
        return extra


def device_busy_share(timing: Any) -> float | None:
    """Device time over eager time of one step, when the timing loop measured both (None otherwise).

    The timing loop's ``eager_time`` is the eager per-step time, its judged ``typical`` the
    device time (CUDA graph replay or CUPTI kernel sums) whenever ``eager_time`` is set.
    """
    eager = _first_number(timing, ("eager_time", "eager_seconds"))
    device = _first_number(timing, ("device_time", "device_seconds", "typical"))
    if device is None or eager is None or eager <= 0:
        return None
    return min(1.0, device / eager)


def _first_number(obj: Any, names: tuple[str, ...]) -> float | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return float(value)
    return None


def classify(
    flops: float,
    bytes_moved: float,
    seconds: float,
    roofs: Roofs,
    latency_share: float = DEFAULT_LATENCY_SHARE,
    baseline_bound: str | None = None,
    hysteresis: float = HYSTERESIS,
    working_set: float | None = None,
    device_busy: float | None = None,
    cold: bool = False,
) -> Roofline:
    """Classify a step from its FLOPs, bytes and time against measured roofs (see the module docstring)."""
    if roofs.peak_flops <= 0 or roofs.bandwidth <= 0:
        raise ValueError(f"measured roofs must be positive, got {roofs.peak_flops} FLOP/s and {roofs.bandwidth} B/s")
    level, bandwidth = roofs.level_for(working_set, cold)
    args = (flops, bytes_moved, seconds, roofs.peak_flops, bandwidth, latency_share, level, working_set or 0.0)
    probe = Roofline(LATENCY_BOUND, *args, device_busy=device_busy, hysteresis=hysteresis)
    bound = _raw_bound(probe)
    kept = baseline_bound not in (None, bound) and _near_boundary(probe, bound, str(baseline_bound), hysteresis)
    if kept:
        bound = str(baseline_bound)
    return Roofline(bound, *args, device_busy=device_busy, kept_from_baseline=kept, hysteresis=hysteresis)


def _raw_bound(probe: Roofline) -> str:
    if probe.device_busy is not None and probe.device_busy < HOST_BUSY_SHARE:
        return HOST_BOUND
    if probe.roof_share < probe.latency_share:
        return LATENCY_BOUND
    return COMPUTE_BOUND if probe.arithmetic_intensity >= probe.ridge_point else MEMORY_BOUND


def _within(value: float, boundary: float, hysteresis: float) -> bool:
    return boundary / (1.0 + hysteresis) <= value <= boundary * (1.0 + hysteresis)


def _near_boundary(probe: Roofline, bound: str, baseline_bound: str, hysteresis: float = HYSTERESIS) -> bool:
    """True when the step is close enough to the boundary between ``bound`` and ``baseline_bound`` to be noise."""
    if baseline_bound not in BOUNDS:
        return False
    if HOST_BOUND in (bound, baseline_bound):
        return probe.device_busy is not None and _within(probe.device_busy, HOST_BUSY_SHARE, hysteresis)
    if LATENCY_BOUND in (bound, baseline_bound):
        return _within(probe.roof_share, probe.latency_share, hysteresis)
    return _within(probe.arithmetic_intensity, probe.ridge_point, hysteresis)
