"""The interface every backend implements (cuda, mps, vulkan, cpu, third-party).

A backend answers the measuring loop's questions: is it here (and if not,
why), what hardware is it (fingerprint), how to wait for queued work
(synchronize), how long did ``iters`` calls of a step take on the device
(``time_block``), how are its steps timed (``sampler``: a strategy of
:mod:`pytest_gpuperf.timing.samplers`, and the ``instruments`` held while they
are), and how much device memory did one call need at its peak
(``measure_peak_memory``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_gpuperf.timing.kernel_signature import KernelSignature
    from pytest_gpuperf.timing.record import Instrument
    from pytest_gpuperf.timing.samplers import Sampler
    from pytest_gpuperf.timing.sampling import MeasureConfig


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; ``reason`` says what was found either way."""

    available: bool
    reason: str


class Backend(abc.ABC):
    """A device family the plugin can measure on.

    Subclasses are registered under the ``pytest_gpuperf.backends`` entry-point
    group (see :mod:`pytest_gpuperf.backends`); their constructor must be cheap
    and must not import heavy libraries: :meth:`availability` may.
    """

    #: Short name used on the command line and in test ids (``cuda``, ``cpu`` ...).
    name: str = ""
    #: True when tests written against ``torch`` tensors can run on this backend.
    runs_torch: bool = True

    @abc.abstractmethod
    def availability(self) -> Availability:
        """Say whether the backend can run here, with the reason."""

    @abc.abstractmethod
    def device(self) -> Any:
        """The device object tests compute on (a ``torch.device`` for torch backends)."""

    @abc.abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """Hardware and software identity; see :mod:`pytest_gpuperf.backends.fingerprint`."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block until all work queued on the device has finished."""

    @abc.abstractmethod
    def time_block(self, step: Callable[[], object], iters: int) -> float:
        """Run ``step`` ``iters`` times and return the device time in seconds."""

    @abc.abstractmethod
    def measure_peak_memory(self, step: Callable[[], object]) -> int:
        """Run ``step`` once and return its peak device memory in bytes."""

    def sampler(self, config: MeasureConfig) -> Sampler:
        """How this backend's steps are timed: :meth:`clock_sampler`, each call after a cache flush when
        ``config.l2_flush`` asks for one (torch devices)."""
        from pytest_gpuperf.timing.l2_flush import L2FlushSampler

        clock = self.clock_sampler(config)
        if config.l2_flush and self.runs_torch:
            return L2FlushSampler(clock, self.device, self.time_block)
        return clock

    def clock_sampler(self, config: MeasureConfig) -> Sampler:
        """The sampler of this backend's own clock: :meth:`time_block` around ``iters`` calls per sample."""
        from pytest_gpuperf.timing.samplers import BlockSampler

        return BlockSampler(self.time_block, "events")

    def instruments(self, config: MeasureConfig) -> Sequence[Instrument]:
        """Instruments held over a whole measurement (warm-up and samples); none by default."""
        return ()

    def count_host_syncs(self, step: Callable[[], object]) -> int | None:
        """Run ``step`` once and count the host-device synchronizations it made; None where the backend cannot tell."""
        return None

    def kernel_signature(self, step: Callable[[], object]) -> KernelSignature | None:
        """Run ``step`` once and say which kernels it launched (:mod:`pytest_gpuperf.timing.kernel_signature`);
        None where the backend cannot tell (no call then)."""
        return None

    def peak_memory_and_signature(
        self, step: Callable[[], object], memory: bool
    ) -> tuple[int | None, KernelSignature | None]:
        """The peak-memory probe (when ``memory``) and the kernel signature: one call each, or one call for both
        where one profiled call sees both (the CPU backend)."""
        peak = self.measure_peak_memory(step) if memory else None
        return peak, self.kernel_signature(step)

    def wait_scope(self) -> str:
        """Whose wait for a CPU can slow a sample: ``"thread"`` (the step runs on the calling thread, or on a device
        of its own) or ``"process"`` (worker threads of this process do the step on the host's cores)."""
        return "thread"

    def is_host_cpu(self) -> bool:
        """True when the work runs on the host's CPU cores (cpu backend, a CPU Vulkan adapter such as lavapipe).

        Such devices share cores with everything else on the machine, so they get the CPU
        time tolerance (``gpuperf_cpu_time_tolerance``) instead of the GPU one.
        """
        return False

    def memory_note(self) -> str:
        """One line saying what the peak-memory number includes and misses."""
        return ""

    def reset_state(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Free cached memory between tests (optional)."""
