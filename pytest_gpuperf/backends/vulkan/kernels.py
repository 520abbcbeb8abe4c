"""WGSL compute kernels: saxpy (bandwidth), tiled matmul (compute) and an FMA chain (peak compute).

Every builder takes :class:`~pytest_gpuperf.backends.vulkan.device.Buffer` objects and returns a
:class:`~pytest_gpuperf.backends.vulkan.device.Kernel`; calling the kernel records one dispatch.
Grids larger than 65535 workgroups in x are folded into y (WebGPU's per-dimension limit).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.backends.vulkan.device import Buffer, Kernel, VulkanDevice

MAX_GROUPS_PER_DIM = 65535
LINEAR_WORKGROUP = 256

SAXPY_WGSL = """
struct Params { a: f32, n: u32, pad0: u32, pad1: u32 }
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn saxpy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i < params.n) {
        out[i] = params.a * x[i] + y[i];
    }
}
"""

COPY_WGSL = """
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i < arrayLength(&src)) {
        dst[i] = src[i];
    }
}
"""

#: 64x64 output tile per workgroup of 16x16 threads, each thread 4x4 outputs; K in steps of 16.
MATMUL_WGSL = """
struct Dims { m: u32, n: u32, k: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;

var<workgroup> tile_a: array<f32, 1024>;  // 64 rows x 16 k
var<workgroup> tile_b: array<f32, 1024>;  // 16 k x 64 cols

@compute @workgroup_size(16, 16)
fn matmul(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let tid = lid.y * 16u + lid.x;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    var acc: array<f32, 16>;
    for (var k0 = 0u; k0 < dims.k; k0 = k0 + 16u) {
        for (var i = 0u; i < 4u; i = i + 1u) {
            let idx = tid + i * 256u;
            let ar = idx / 16u;
            let ac = idx % 16u;
            var av = 0.0;
            if (row0 + ar < dims.m && k0 + ac < dims.k) { av = a[(row0 + ar) * dims.k + k0 + ac]; }
            tile_a[idx] = av;
            let br = idx / 64u;
            let bc = idx % 64u;
            var bv = 0.0;
            if (k0 + br < dims.k && col0 + bc < dims.n) { bv = b[(k0 + br) * dims.n + col0 + bc]; }
            tile_b[idx] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            var ra: array<f32, 4>;
            var rb: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                ra[i] = tile_a[(lid.y * 4u + i) * 16u + kk];
                rb[i] = tile_b[kk * 64u + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(ra[i], rb[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let r = row0 + lid.y * 4u + i;
            let col = col0 + lid.x * 4u + j;
            if (r < dims.m && col < dims.n) { c[r * dims.n + col] = acc[i * 4u + j]; }
        }
    }
}
"""

#: Eight independent vec4 FMA chains per thread: 64 FLOP per loop trip, no memory traffic.
FMA_WGSL = """
struct Params { trips: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(256)
fn fma_chain(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    let seed = f32(i % 1024u) * 1e-4;
    var v0 = vec4<f32>(seed, seed + 0.1, seed + 0.2, seed + 0.3);
    var v1 = v0 + 0.01; var v2 = v0 + 0.02; var v3 = v0 + 0.03;
    var v4 = v0 + 0.04; var v5 = v0 + 0.05; var v6 = v0 + 0.06; var v7 = v0 + 0.07;
    let m = vec4<f32>(0.9999);
    let k = vec4<f32>(0.0001);
    for (var t = 0u; t < params.trips; t = t + 1u) {
        v0 = fma(v0, m, k); v1 = fma(v1, m, k); v2 = fma(v2, m, k); v3 = fma(v3, m, k);
        v4 = fma(v4, m, k); v5 = fma(v5, m, k); v6 = fma(v6, m, k); v7 = fma(v7, m, k);
    }
    let s = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
    if (i < arrayLength(&out)) { out[i] = s.x + s.y + s.z + s.w; }
}
"""
FMA_FLOP_PER_TRIP = 8 * 4 * 2


def linear_grid(threads: int, workgroup: int = LINEAR_WORKGROUP) -> tuple[int, int]:
    """Workgroups covering ``threads`` 1-D invocations, folded into (x, y) under the per-dimension limit."""
    groups = max(1, math.ceil(threads / workgroup))
    if groups <= MAX_GROUPS_PER_DIM:
        return groups, 1
    rows = math.ceil(groups / MAX_GROUPS_PER_DIM)
    return math.ceil(groups / rows), rows


def saxpy(device: VulkanDevice, alpha: float, x: Buffer, y: Buffer, out: Buffer) -> Kernel:
    """``out = alpha * x + y`` over float32 vectors whose length is a multiple of 4."""
    import numpy as np

    n = x.nbytes // 16
    params = np.zeros(4, dtype=np.uint32)
    params[0] = np.float32(alpha).view(np.uint32)
    params[1] = n
    uniform = device.buffer(params, uniform=True, tracked=out.tracked)
    return device.kernel(SAXPY_WGSL, "saxpy", [x, y, out, uniform], linear_grid(n))


def copy(device: VulkanDevice, src: Buffer, dst: Buffer) -> Kernel:
    """``dst[:] = src`` in vec4 loads and stores (the bandwidth roof's kernel)."""
    return device.kernel(COPY_WGSL, "copy", [src, dst], linear_grid(src.nbytes // 16))


def matmul(device: VulkanDevice, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int) -> Kernel:
    """``c[m, n] = a[m, k] @ b[k, n]`` in float32 with 64x64 shared-memory tiles."""
    import numpy as np

    dims = device.buffer(np.array([m, n, k, 0], dtype=np.uint32), uniform=True, tracked=c.tracked)
    return device.kernel(MATMUL_WGSL, "matmul", [a, b, c, dims], (math.ceil(n / 64), math.ceil(m / 64)))


def fma_chain(device: VulkanDevice, out: Buffer, trips: int) -> Kernel:
    """Pure arithmetic: ``len(out)`` threads x ``trips`` x 64 FLOP (the compute roof's kernel)."""
    import numpy as np

    params = device.buffer(np.array([trips, 0, 0, 0], dtype=np.uint32), uniform=True, tracked=out.tracked)
    return device.kernel(FMA_WGSL, "fma_chain", [out, params], linear_grid(out.nbytes // 4))
