"""``gpuperf.device`` on the vulkan backend: a small wrapper around a ``wgpu.GPUDevice``.

Tests allocate storage buffers with :meth:`VulkanDevice.buffer` / :meth:`VulkanDevice.empty`
(the device counts their bytes: that is the backend's peak-memory number) and build
kernels with :meth:`VulkanDevice.kernel`. Calling a :class:`Kernel` *records* one
dispatch; recorded dispatches are encoded into one compute pass and submitted when
the device is flushed (by a read-back, :meth:`VulkanDevice.synchronize`, or the
backend's timer). Because the step records through the wrapper, the backend can
bracket its dispatches with GPU timestamp queries (``timestamp_writes`` on the
compute pass) and time exactly the device work.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pytest_gpuperf.backends.vulkan.adapters import AdapterInfo

_NS = 1e-9


class Buffer:
    """A storage (or uniform) buffer on the device, with the shape and dtype of the array it holds."""

    def __init__(self, device: VulkanDevice, raw: Any, shape: tuple[int, ...], dtype: str, tracked: bool) -> None:
        self.device = device
        self.raw = raw
        self.shape = shape
        self.dtype = dtype
        self.nbytes = int(raw.size)
        self.tracked = tracked

    def read(self) -> Any:
        """Flush pending dispatches and copy the buffer back into a new numpy array."""
        import numpy as np

        self.device.flush()
        data = self.device.wgpu_device.queue.read_buffer(self.raw)
        return np.frombuffer(data, dtype=self.dtype).copy().reshape(self.shape)

    def write(self, array: Any) -> None:
        """Overwrite the buffer with ``array`` (same byte size)."""
        import numpy as np

        data = np.ascontiguousarray(array, dtype=self.dtype)
        if data.nbytes != self.nbytes:
            raise ValueError(f"Buffer.write: {data.nbytes} bytes given for a {self.nbytes}-byte buffer")
        self.device.flush()
        self.device.wgpu_device.queue.write_buffer(self.raw, 0, data)


class Kernel:
    """A WGSL entry point bound to its buffers; calling it records one dispatch on the device."""

    def __init__(self, device: VulkanDevice, pipeline: Any, bind_group: Any, workgroups: tuple[int, int, int]) -> None:
        self.device = device
        self.pipeline = pipeline
        self.bind_group = bind_group
        self.workgroups = workgroups

    def __call__(self) -> None:
        """Record one dispatch (submitted at the next flush)."""
        self.device.record(self)


class NothingRecordedError(RuntimeError):
    """A timed step recorded no dispatch through the wrapper, so the GPU timer saw nothing."""


class VulkanDevice:
    """A wgpu device plus the adapter it came from, buffer accounting and a dispatch recorder."""

    def __init__(self, adapter: Any, info: AdapterInfo, wgpu_device: Any, timestamps: bool) -> None:
        self.adapter = adapter
        self.info = info
        self.wgpu_device = wgpu_device
        #: True when dispatches are timed with GPU timestamp queries.
        self.timestamps = timestamps
        self.timestamp_period_ns = _timestamp_period(wgpu_device) if timestamps else 1.0
        self._pending: list[Kernel] = []
        self._timing: list[float] | None = None
        self._dispatches = 0
        self._live: dict[int, int] = {}  # token -> bytes of a tracked buffer alive now
        self._next_token = 0
        self._live_bytes = 0
        self._peak_bytes = 0
        self._tracked: weakref.WeakSet[Buffer] = weakref.WeakSet()
        self._shaders: dict[str, Any] = {}
        self._query_set: Any = None
        self._query_buffer: Any = None
        self._fence: Any = None
        self._work_done_works = True

    # -- sizing ----------------------------------------------------------------
    @property
    def device_type(self) -> str:
        """wgpu's adapter type: ``DiscreteGPU``, ``IntegratedGPU``, ``CPU`` ..."""
        return self.info.device_type

    @property
    def max_binding_bytes(self) -> int:
        """Largest storage buffer one binding may cover (``max-storage-buffer-binding-size``)."""
        return int(self.wgpu_device.limits["max-storage-buffer-binding-size"])

    def max_floats(self, wanted: int) -> int:
        """``wanted`` float32 elements, capped to fit one storage binding (a multiple of 4)."""
        return min(int(wanted), self.max_binding_bytes // 4 // 4 * 4)

    def pick(self, default: Any = None, **per_type: Any) -> Any:
        """Size work by adapter type: ``device.pick(cpu=256, default=4096)`` (keys are lower-case types)."""
        key = self.device_type.lower()
        if key in per_type:
            return per_type[key]
        if default is None:
            raise KeyError(
                f"VulkanDevice.pick() has no value for adapter type {self.device_type!r}; pass {key}=... or default=..."
            )
        return default

    # -- buffers and memory accounting -------------------------------------------
    def buffer(self, array: Any, *, uniform: bool = False, tracked: bool = True) -> Buffer:
        """Upload ``array`` into a new storage buffer (``uniform=True``: a uniform buffer)."""
        import numpy as np
        import wgpu

        data = np.ascontiguousarray(array)
        usage = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        usage |= wgpu.BufferUsage.UNIFORM if uniform else wgpu.BufferUsage.STORAGE
        raw = self.wgpu_device.create_buffer_with_data(data=data, usage=usage)
        return self._track(Buffer(self, raw, tuple(data.shape), data.dtype.str, tracked))

    def empty(self, shape: Sequence[int] | int, dtype: str = "float32", *, tracked: bool = True) -> Buffer:
        """A new storage buffer of ``shape`` (contents zero-filled by WebGPU)."""
        import numpy as np
        import wgpu

        dims = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        dt = np.dtype(dtype)
        nbytes = max(4, int(np.prod(dims)) * dt.itemsize)
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        raw = self.wgpu_device.create_buffer(size=nbytes, usage=usage)
        return self._track(Buffer(self, raw, dims, dt.str, tracked))

    def _track(self, buf: Buffer) -> Buffer:
        if buf.tracked:
            self._next_token += 1
            self._live[self._next_token] = buf.nbytes
            self._live_bytes += buf.nbytes
            self._peak_bytes = max(self._peak_bytes, self._live_bytes)
            self._tracked.add(buf)
            weakref.finalize(buf, self._forget, self._next_token)
        return buf

    def _forget(self, token: int) -> None:
        self._live_bytes -= self._live.pop(token, 0)

    @property
    def live_bytes(self) -> int:
        """Bytes of tracked buffers alive now."""
        return self._live_bytes

    @property
    def peak_bytes(self) -> int:
        """Most tracked bytes alive at once since the last :meth:`reset_peak`."""
        return self._peak_bytes

    def reset_peak(self) -> None:
        """Start a new peak at the bytes alive now (like ``torch.cuda.reset_peak_memory_stats``)."""
        self._peak_bytes = self._live_bytes

    def release_all(self) -> None:
        """Destroy every tracked buffer (end of a test); untracked ones (the roof kernels' buffers) stay."""
        self.flush()
        for buf in list(self._tracked):
            buf.raw.destroy()
            self._tracked.discard(buf)
        self._live.clear()
        self._live_bytes = 0
        self._peak_bytes = 0

    # -- kernels and dispatch recording ------------------------------------------
    def kernel(
        self,
        wgsl: str,
        entry: str,
        bindings: Sequence[Buffer],
        workgroups: Sequence[int],
    ) -> Kernel:
        """Compile ``entry`` of ``wgsl`` (cached per source) and bind ``bindings`` to ``@binding(0..)`` of group 0."""
        if wgsl not in self._shaders:
            self._shaders[wgsl] = self.wgpu_device.create_shader_module(code=wgsl)
        pipeline = self.wgpu_device.create_compute_pipeline(
            layout="auto", compute={"module": self._shaders[wgsl], "entry_point": entry}
        )
        entries = [{"binding": i, "resource": {"buffer": buf.raw}} for i, buf in enumerate(bindings)]
        bind_group = self.wgpu_device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
        groups = (*(int(w) for w in workgroups), 1, 1)[:3]
        return Kernel(self, pipeline, bind_group, groups)  # type: ignore[arg-type]

    def record(self, kernel: Kernel) -> None:
        """Queue one dispatch of ``kernel`` for the next flush."""
        self._pending.append(kernel)
        self._dispatches += 1

    def flush(self) -> None:
        """Encode the recorded dispatches into one compute pass and submit it.

        While :meth:`timed` is active and the device has timestamp queries, the pass
        carries ``timestamp_writes`` and its GPU duration is read back and kept.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        stamped = self._timing is not None and self.timestamps
        encoder = self.wgpu_device.create_command_encoder()
        writes = None
        if stamped:
            self._ensure_queries()
            writes = {"query_set": self._query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        compute = encoder.begin_compute_pass(timestamp_writes=writes)
        current = None
        for kernel in pending:
            if kernel.pipeline is not current:
                compute.set_pipeline(kernel.pipeline)
                current = kernel.pipeline
            compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(*kernel.workgroups)
        compute.end()
        if stamped:
            encoder.resolve_query_set(self._query_set, 0, 2, self._query_buffer, 0)
        self.wgpu_device.queue.submit([encoder.finish()])
        if stamped:
            self._timing.append(self._read_pass_seconds())  # type: ignore[union-attr]

    def _ensure_queries(self) -> None:
        import wgpu

        if self._query_set is None:
            self._query_set = self.wgpu_device.create_query_set(type="timestamp", count=2)
            self._query_buffer = self.wgpu_device.create_buffer(
                size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )

    def _read_pass_seconds(self) -> float:
        import numpy as np

        stamps = np.frombuffer(self.wgpu_device.queue.read_buffer(self._query_buffer), dtype=np.uint64)
        ticks = int(stamps[1]) - int(stamps[0])
        return max(ticks, 0) * self.timestamp_period_ns * _NS

    def synchronize(self) -> None:
        """Flush, then block until the queue has finished all submitted work.

        Uses ``queue.on_submitted_work_done_sync()``; where the installed wgpu's binding of
        it is broken (wgpu 0.32 with its bundled wgpu-native raises ``TypeError`` on the
        callback type) it reads back a 4-byte buffer instead, which waits for the same
        work because the queue executes in submission order.
        """
        self.flush()
        if self._work_done_works:
            try:
                self.wgpu_device.queue.on_submitted_work_done_sync()
                return
            except TypeError:
                self._work_done_works = False
        if self._fence is None:
            import wgpu

            self._fence = self.wgpu_device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
        self.wgpu_device.queue.read_buffer(self._fence)

    @contextmanager
    def timed(self) -> Iterator[_Timer]:
        """Time the dispatches recorded inside the block with GPU timestamps (sum over flushed passes)."""
        if not self.timestamps:
            raise RuntimeError(
                f"{self.info.name}: this adapter has no timestamp-query; time with synchronize + host clock instead"
            )
        self.flush()
        timer = _Timer()
        self._timing = []
        dispatches = self._dispatches
        try:
            yield timer
            self.flush()
        finally:
            timer.passes = list(self._timing)
            self._timing = None
        timer.dispatches = self._dispatches - dispatches
        timer.seconds = sum(timer.passes)

    def host_timed_seconds(self, step: Any, iters: int) -> float:
        """Fallback timer: synchronize, run ``iters`` steps, synchronize; host-clock seconds."""
        self.synchronize()
        dispatches = self._dispatches
        start = time.perf_counter()
        for _ in range(iters):
            step()
        self.synchronize()
        elapsed = time.perf_counter() - start
        if self._dispatches == dispatches:
            raise NothingRecordedError(_nothing_recorded_message(self.info.name))
        return elapsed


class _Timer:
    """What :meth:`VulkanDevice.timed` measured."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.passes: list[float] = []
        self.dispatches = 0


def _nothing_recorded_message(name: str) -> str:
    return (
        f"vulkan backend ({name}): the measured step recorded no dispatch; build kernels with "
        "gpuperf.device.kernel(wgsl, entry, bindings, workgroups) and call them inside the step"
    )


def _timestamp_period(wgpu_device: Any) -> float:
    """Nanoseconds per timestamp tick (``wgpuQueueGetTimestampPeriod``), 1.0 where it cannot be asked."""
    try:
        from wgpu.backends.wgpu_native._api import libf

        period = float(libf.wgpuQueueGetTimestampPeriod(wgpu_device.queue._internal))
    except (ImportError, AttributeError, TypeError):
        return 1.0
    return period if period > 0 else 1.0
