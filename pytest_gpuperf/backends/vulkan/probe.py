"""Ask the Vulkan loader itself what wgpu does not say: device extensions and memory heaps.

wgpu reports an adapter's name, type, driver and WebGPU features, but not the
Vulkan device extensions (``VK_KHR_cooperative_matrix``) nor the size of
device-local memory. This module calls ``libvulkan`` through ``ctypes``
(``vkCreateInstance``, ``vkEnumeratePhysicalDevices``,
``vkGetPhysicalDeviceProperties``, ``vkGetPhysicalDeviceMemoryProperties``,
``vkEnumerateDeviceExtensionProperties``) and falls back to ``vulkaninfo``
output when the loader cannot be opened that way. Where neither works the
answer is ``None`` ("unknown"), never a guess.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

VK_SUCCESS = 0
VK_INCOMPLETE = 5
_STRUCTURE_TYPE_APPLICATION_INFO = 0
_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1
_MEMORY_HEAP_DEVICE_LOCAL = 0x1
_NAME_SIZE = 256
#: Generous sizes for the structs read as raw bytes (real sizes: ~824 and 520 bytes).
_PROPERTIES_BYTES = 4096
_MEMORY_PROPERTIES_BYTES = 1024
_EXTENSION_BYTES = _NAME_SIZE + 4


@dataclass(frozen=True)
class PhysicalDevice:
    """One Vulkan physical device as the loader reports it."""

    name: str
    vendor_id: int
    device_id: int
    device_type: int
    api_version: str
    device_local_bytes: int
    extensions: frozenset[str] = field(default_factory=frozenset)


class _ApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", ctypes.c_uint32),
        ("pEngineName", ctypes.c_char_p),
        ("engineVersion", ctypes.c_uint32),
        ("apiVersion", ctypes.c_uint32),
    ]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.POINTER(_ApplicationInfo)),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


def _open_loader() -> ctypes.CDLL | None:
    for name in ("libvulkan.so.1", ctypes.util.find_library("vulkan"), "libvulkan.1.dylib", "vulkan-1.dll"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _version(value: int) -> str:
    return f"{(value >> 22) & 0x7F}.{(value >> 12) & 0x3FF}.{value & 0xFFF}"


def _device_local_bytes(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> int:
    raw = (ctypes.c_uint8 * _MEMORY_PROPERTIES_BYTES)()
    lib.vkGetPhysicalDeviceMemoryProperties(handle, raw)
    data = bytes(raw)
    # memoryTypeCount (4) + memoryTypes[32] (8 each) -> memoryHeapCount at 260, heaps (16 each) at 264.
    heap_count = int.from_bytes(data[260:264], "little")
    sizes = []
    for index in range(min(heap_count, 16)):
        offset = 264 + 16 * index
        size = int.from_bytes(data[offset : offset + 8], "little")
        flags = int.from_bytes(data[offset + 8 : offset + 12], "little")
        if flags & _MEMORY_HEAP_DEVICE_LOCAL:
            sizes.append(size)
    return max(sizes, default=0)


def _extensions(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> frozenset[str]:
    count = ctypes.c_uint32(0)
    lib.vkEnumerateDeviceExtensionProperties(handle, None, ctypes.byref(count), None)
    raw = (ctypes.c_uint8 * (_EXTENSION_BYTES * max(count.value, 1)))()
    status = lib.vkEnumerateDeviceExtensionProperties(handle, None, ctypes.byref(count), raw)
    if status not in (VK_SUCCESS, VK_INCOMPLETE):
        return frozenset()
    data = bytes(raw)
    names = set()
    for index in range(count.value):
        chunk = data[index * _EXTENSION_BYTES : index * _EXTENSION_BYTES + _NAME_SIZE]
        names.add(chunk.split(b"\0", 1)[0].decode("utf-8", "replace"))
    return frozenset(names)


def _describe(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> PhysicalDevice:
    raw = (ctypes.c_uint8 * _PROPERTIES_BYTES)()
    lib.vkGetPhysicalDeviceProperties(handle, raw)
    data = bytes(raw)
    words = [int.from_bytes(data[i : i + 4], "little") for i in range(0, 20, 4)]
    name = data[20 : 20 + _NAME_SIZE].split(b"\0", 1)[0].decode("utf-8", "replace")
    return PhysicalDevice(
        name=name,
        vendor_id=words[2],
        device_id=words[3],
        device_type=words[4],
        api_version=_version(words[0]),
        device_local_bytes=_device_local_bytes(lib, handle),
        extensions=_extensions(lib, handle),
    )


def _probe_loader() -> list[PhysicalDevice] | None:
    lib = _open_loader()
    if lib is None:
        return None
    lib.vkGetPhysicalDeviceProperties.restype = None
    lib.vkGetPhysicalDeviceMemoryProperties.restype = None
    lib.vkEnumeratePhysicalDevices.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
    lib.vkDestroyInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    for fn in (lib.vkGetPhysicalDeviceProperties, lib.vkGetPhysicalDeviceMemoryProperties):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.vkEnumerateDeviceExtensionProperties.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_void_p,
    ]
    app = _ApplicationInfo(_STRUCTURE_TYPE_APPLICATION_INFO, None, b"pytest-gpuperf", 1, b"pytest-gpuperf", 1, 1 << 22)
    info = _InstanceCreateInfo(_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    instance = ctypes.c_void_p()
    if lib.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance)) != VK_SUCCESS:
        return None
    try:
        count = ctypes.c_uint32(0)
        lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * max(count.value, 1))()
        lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        return [_describe(lib, ctypes.c_void_p(handles[i])) for i in range(count.value)]
    finally:
        lib.vkDestroyInstance(instance, None)


def _probe_vulkaninfo() -> list[PhysicalDevice] | None:
    """Parse ``vulkaninfo --summary``-free output: device names and their extension lists."""
    exe = shutil.which("vulkaninfo")
    if exe is None:
        return None
    try:
        text = subprocess.run([exe], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    devices: list[PhysicalDevice] = []
    name, extensions = "", set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("deviceName"):
            if name:
                devices.append(PhysicalDevice(name, 0, 0, 0, "", 0, frozenset(extensions)))
            name, extensions = stripped.split("=", 1)[1].strip(), set()
        elif stripped.startswith("VK_") and ":" in stripped:
            extensions.add(stripped.split(":", 1)[0].strip())
    if name:
        devices.append(PhysicalDevice(name, 0, 0, 0, "", 0, frozenset(extensions)))
    return devices or None


@lru_cache(maxsize=1)
def physical_devices() -> tuple[PhysicalDevice, ...] | None:
    """Every Vulkan physical device the loader sees, or None when it cannot be asked."""
    try:
        found = _probe_loader()
    except (OSError, AttributeError, ValueError):
        found = None
    if found is None:
        found = _probe_vulkaninfo()
    return tuple(found) if found is not None else None


def find_physical_device(name: str, vendor_id: int, device_id: int) -> PhysicalDevice | None:
    """The physical device behind a wgpu adapter (matched by ids, then by name), or None."""
    devices = physical_devices() or ()
    for device in devices:
        if device.vendor_id == vendor_id and device.device_id == device_id and device.name == name:
            return device
    for device in devices:
        if device.name == name:
            return device
    return None
