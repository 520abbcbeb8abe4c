"""SM clock and clock-event (throttle) reasons of the measuring GPU, read through NVML with ctypes.

A GPU that runs at another clock, or is held back by power or thermal limits,
measures another machine: rather than rescaling its times, the loop records what
NVML says while it measures (``TimingResult.clocks``) so the judge can compare
it with the baseline's and call a changed machine inconclusive. ``pynvml`` is
not needed: ``libnvidia-ml.so.1`` (installed with the driver) is called
directly; where it is missing every reading degrades to an ``nvml_error`` note.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_gpuperf.timing.record import CLOCKS

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0

#: Clock-event reason bits (nvml.h ``nvmlClocksEventReason*``) and their names.
CLOCK_EVENT_NAMES: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that slow the GPU below the clock it would otherwise run at (thermal, hardware slowdown, power brake).
THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80
POWER_CAP_MASK = 0x4


def reason_names(mask: int) -> list[str]:
    """Names of the reason bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in CLOCK_EVENT_NAMES.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_NAMES)
    return names + ([hex(unknown)] if unknown else [])


@dataclass(frozen=True)
class ClockReading:
    """One NVML reading: SM clock (MHz), clock-event reason bits, GPU temperature (C, -1 if unread),
    memory clock (MHz, 0 if unread) and power (W, NVML's moving average, 0.0 if unread)."""

    sm_clock_mhz: int
    reasons: int
    temperature_c: int = -1
    mem_clock_mhz: int = 0
    power_w: float = 0.0


class Nvml:
    """A handle on one GPU through ``libnvidia-ml.so.1``; :meth:`read` returns a :class:`ClockReading`."""

    def __init__(self, pci_bus_id: str = "", index: int = 0, library: str = "libnvidia-ml.so.1") -> None:
        self.lib = ctypes.CDLL(library)
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        if pci_bus_id:
            code = self.lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(self.handle))
            if code != 0:
                pci_bus_id = ""
        if not pci_bus_id:
            self._check(
                self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self.handle)),
                "nvmlDeviceGetHandleByIndex_v2",
            )
        getter = getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = getter or self.lib.nvmlDeviceGetCurrentClocksThrottleReasons

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise OSError(f"{what} returned NVML error {code}")

    def read(self) -> ClockReading:
        """The SM and memory clocks, clock-event reasons, power and temperature now (a few microseconds)."""
        clock = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clock)), "clock info")
        reasons = ctypes.c_ulonglong()
        self._check(self._reasons(self.handle, ctypes.byref(reasons)), "clock event reasons")
        temp = ctypes.c_uint()
        ok = self.lib.nvmlDeviceGetTemperature(self.handle, NVML_TEMPERATURE_GPU, ctypes.byref(temp)) == 0
        mem = ctypes.c_uint()
        mem_ok = self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_MEM, ctypes.byref(mem)) == 0
        milliwatts = ctypes.c_uint()
        power_ok = self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(milliwatts)) == 0
        return ClockReading(
            int(clock.value),
            int(reasons.value),
            int(temp.value) if ok else -1,
            int(mem.value) if mem_ok else 0,
            milliwatts.value / 1000.0 if power_ok else 0.0,
        )


def torch_pci_bus_id() -> str:
    """NVML's PCI bus id (``00000000:19:00.0``) of torch's current CUDA device, "" where torch does not say."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    domain, bus, device = (getattr(props, key, None) for key in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if bus is None or device is None:
        return ""
    return f"{int(domain or 0):08X}:{int(bus):02X}:{int(device):02X}.0"


_shared: dict[str, Nvml | str] = {}


def current_device_reader() -> Callable[[], ClockReading]:
    """A reader for torch's current CUDA device (NVML opened once per process); raises OSError when absent."""
    import torch

    key = str(torch.cuda.current_device())
    if key not in _shared:
        try:
            _shared[key] = Nvml(torch_pci_bus_id(), index=torch.cuda.current_device())
        except (OSError, AttributeError) as exc:
            _shared[key] = f"NVML unavailable: {exc}"
    found = _shared[key]
    if isinstance(found, str):
        raise OSError(found)
    return found.read


@dataclass
class ClockWatch:
    """Instrument: NVML readings at entry, during the samples and at exit; :meth:`summary` is what
    ``TimingResult.clocks`` holds. :meth:`timed` gives each sample the SM clock read around it."""

    reader: Callable[[], ClockReading] | None
    error: str = ""
    readings: list[ClockReading] = field(default_factory=list)
    #: SM clock (MHz) of each timed sample: the mean of the readings right before and after it.
    sample_clocks: list[float] = field(default_factory=list)
    #: Its name among a timing record's instruments (``TimingResult.clocks``).
    name: ClassVar[str] = CLOCKS
    _facts: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def for_current_device(cls) -> ClockWatch:
        """A watch on torch's current CUDA device (one that only reports the error when NVML is absent)."""
        try:
            return cls(current_device_reader())
        except OSError as exc:
            return cls(None, str(exc))

    def read(self) -> ClockReading | None:
        """Take one reading (a failing read is noted, never raised; None then)."""
        if self.reader is None:
            return None
        try:
            reading = self.reader()
        except OSError as exc:
            self.error = str(exc)
            return None
        self.readings.append(reading)
        return reading

    def __enter__(self) -> ClockWatch:
        self.read()
        return self

    def __exit__(self, *exc: object) -> None:
        self.read()
        self._facts = self.summary()

    def facts(self) -> dict[str, Any]:
        """The :meth:`summary` after the last reading, taken at exit (instrument contract)."""
        return self._facts if self._facts is not None else self.summary()

    def timed(self, take: Callable[[], float]) -> Callable[[], float]:
        """``take`` with a reading right before and after each call; their mean SM clock is the sample's."""
        if self.reader is None:
            return take

        def bracketed() -> float:
            before = self.read()
            value = take()
            after = self.read()
            if before is not None and after is not None:
                self.sample_clocks.append((before.sm_clock_mhz + after.sm_clock_mhz) / 2.0)
            return value

        return bracketed

    def summary(self) -> dict[str, Any]:
        """SM clock range, reasons seen (OR of all readings), throttled / power-capped flags, hottest temperature."""
        if not self.readings:
            return {"nvml_error": self.error or "no NVML reading"}
        reasons = 0
        for reading in self.readings:
            reasons |= reading.reasons
        clocks = [r.sm_clock_mhz for r in self.readings]
        mem = [r.mem_clock_mhz for r in self.readings if r.mem_clock_mhz > 0]
        power = [r.power_w for r in self.readings if r.power_w > 0]
        sampled = sorted(self.sample_clocks)
        out: dict[str, Any] = {}
        if mem:
            out["mem_clock_mhz"] = sorted(mem)[len(mem) // 2]
        if power:
            out["power_w_max"] = round(max(power), 1)
        return out | {
            # The clock the samples ran at (the median of their own readings), else the lowest reading.
            "sm_clock_mhz": round(sampled[len(sampled) // 2], 1) if sampled else min(clocks),
            "sm_clock_mhz_min": min(clocks),
            "sm_clock_mhz_max": max(clocks),
            "clock_event_reasons": reasons,
            "clock_events": ",".join(reason_names(reasons)),
            "throttled": bool(reasons & THROTTLE_MASK),
            "power_capped": bool(reasons & POWER_CAP_MASK),
            "gpu_temperature_c": max(r.temperature_c for r in self.readings),
            "nvml_readings": len(self.readings),
        }
