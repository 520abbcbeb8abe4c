"""FLOP and byte counts of real torch ops: known counts per op, and the bounds every op of a broad set obeys."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from pytest_gpuperf.profiling.counting import StepCount, count_step
from pytest_gpuperf.profiling.op_traffic import attention_flops, causal_pairs
from pytest_gpuperf.profiling.roofs import dtype_class

F32 = 4


def count(step: Callable[[], object]) -> StepCount:
    """One count of ``step`` on the CPU."""
    return count_step(step, lambda: None)


def rand(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random data (never zeros)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_a_matmul_counts_2n3_flops_and_its_three_operands_bytes() -> None:
    a, b = rand(128, 64), rand(64, 32, seed=1)
    counted = count(lambda: a @ b)
    assert counted.flops == 2 * 128 * 64 * 32
    assert counted.bytes == (128 * 64 + 64 * 32 + 128 * 32) * F32
    assert counted.dtype == "float32" and counted.working_set == counted.bytes


@pytest.mark.parametrize(
    "op",
    [
        lambda: torch.empty(1 << 20),
        lambda: torch.empty_like(X),
        lambda: X.new_empty(1 << 20),
        lambda: torch.empty_strided((1024, 1024), (1024, 1)),
    ],
    ids=["empty", "empty_like", "new_empty", "empty_strided"],
)
def test_allocation_only_ops_move_nothing(op: Callable[[], object]) -> None:
    counted = count(op)
    assert (counted.bytes, counted.ops, counted.working_set) == (0, 0, 0)


X = rand(1024, 1024)


def test_a_step_that_allocates_gigabytes_it_never_touches_counts_only_what_it_touches() -> None:
    def step() -> torch.Tensor:
        torch.empty(1 << 28, dtype=torch.uint8)  # 256 MiB never written
        return X * 2

    assert count(step).bytes == 2 * X.numel() * F32


def test_views_and_reshapes_count_nothing_a_copying_reshape_is_a_copy() -> None:
    assert count(lambda: X.view(-1).reshape(1024, 1024).t().unsqueeze(0)[0]).bytes == 0
    assert count(lambda: X.t().reshape(-1)).bytes == 2 * X.numel() * F32  # not a view: a real clone


def test_broadcast_operands_count_their_storage_once() -> None:
    row = rand(1024, seed=1)
    assert count(lambda: X + row.expand(1024, 1024)).bytes == (2 * X.numel() + 1024) * F32


def test_gathers_count_the_rows_taken_not_the_table() -> None:
    table = rand(50_000, 256)
    index = torch.randint(0, 50_000, (64,), generator=torch.Generator().manual_seed(0))
    rows = 64 * 256 * F32
    embedding = count(lambda: torch.nn.functional.embedding(index, table))
    assert embedding.bytes == 2 * rows + index.numel() * 8  # rows read, rows written, the indices
    assert embedding.working_set == 2 * rows + index.numel() * 8
    assert count(lambda: table.index_select(0, index)).bytes == 2 * rows + index.numel() * 8
    assert count(lambda: table[index]).bytes == 2 * rows + index.numel() * 8
    gather_index = torch.randint(0, 256, (50_000, 2), generator=torch.Generator().manual_seed(1))
    gathered = 50_000 * 2 * F32
    assert count(lambda: torch.gather(table, 1, gather_index)).bytes == 2 * gathered + gather_index.numel() * 8


def test_in_place_ops_count_the_mutated_tensor_once_per_direction() -> None:
    y = rand(1024, 1024, seed=2)
    target = rand(1024, 1024, seed=3)
    nbytes = X.numel() * F32
    assert count(lambda: target.add_(y)).bytes == 3 * nbytes  # target read and written once, y read
    assert count(lambda: target.add(y)).bytes == 3 * nbytes  # the same traffic out of place
    assert count(lambda: target.mul_(2)).bytes == 2 * nbytes
    assert count(lambda: target.copy_(y)).bytes == 2 * nbytes  # copy_ only writes its target
    assert count(lambda: target.zero_()).bytes == nbytes
    assert count(lambda: torch.add(X, y, out=target)).bytes == 3 * nbytes  # out= is written, never read


def test_foreach_in_place_ops_count_every_tensor_of_the_list_once_per_direction() -> None:
    tensors = [rand(256, seed=i) for i in range(4)]
    others = [rand(256, seed=10 + i) for i in range(4)]
    assert count(lambda: torch._foreach_add_(tensors, others)).bytes == 4 * 3 * 256 * F32
    assert count(lambda: torch._foreach_mul_(tensors, 0.5)).bytes == 4 * 2 * 256 * F32


def test_in_place_scatters_count_the_rows_they_write() -> None:
    target = rand(10_000, 128)
    index = torch.tensor([3, 7, 11])
    source = rand(3, 128, seed=1)
    rows = 3 * 128 * F32
    assert count(lambda: target.index_add_(0, index, source)).bytes == 3 * rows + 3 * 8  # read, add, write back
    assert count(lambda: target.index_copy_(0, index, source)).bytes == 2 * rows + 3 * 8
    assert count(lambda: target.index_fill_(0, index, 1.5)).bytes == rows + 3 * 8


def test_causal_attention_counts_the_flops_it_does() -> None:
    q, k, v = rand(2, 4, 256, 64), rand(2, 4, 256, 64, seed=1), rand(2, 4, 256, 64, seed=2)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    full = count(lambda: sdpa(q, k, v))
    causal = count(lambda: sdpa(q, k, v, is_causal=True))
    assert full.flops == 2 * 2 * 4 * 256 * 256 * (64 + 64)  # QK^T and PV
    assert causal.flops == pytest.approx(full.flops * causal_pairs(256, 256) / 256**2)
    assert causal.flops / full.flops == pytest.approx(257 / 512)
    assert causal.bytes == full.bytes  # the same tensors are read and written


def test_causal_attention_backward_counts_the_flops_it_does() -> None:
    q, k, v = (rand(1, 2, 128, 32, seed=s).requires_grad_(True) for s in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def step(causal: bool) -> None:
        sdpa(q, k, v, is_causal=causal).sum().backward()

    full, causal = count(lambda: step(False)), count(lambda: step(True))
    forward = 2 * 2 * 128 * 128 * (32 + 32)
    backward = 2 * 2 * 128 * 128 * (3 * 32 + 2 * 32)
    assert full.flops == forward + backward
    assert causal.flops == pytest.approx((forward + backward) * causal_pairs(128, 128) / 128**2)


def test_causal_pairs_and_attention_flops_follow_the_mask() -> None:
    assert causal_pairs(4, 4) == 10 and causal_pairs(2, 4) == 3 and causal_pairs(6, 4) == 10 + 2 * 4
    q = rand(1, 8, 16)
    assert attention_flops(q, q, q, causal=False) == 2 * 8 * 8 * 16 * 2
    assert attention_flops(q, q, q, causal=True, backward=True) == 2 * 36 * (3 * 16 + 2 * 16)


def test_layer_norm_softmax_counts_each_ops_traffic_and_the_bf16_dtype() -> None:
    x = rand(64, 128, dtype=torch.bfloat16)
    norm = torch.nn.LayerNorm(128).to(torch.bfloat16)
    with torch.no_grad():
        counted = count(lambda: torch.softmax(norm(x), dim=-1))
    tensor = 64 * 128 * 2
    assert counted.flops == 0
    assert 4 * tensor <= counted.bytes <= 4 * tensor + 64 * 128 * 4  # plus weight, bias, mean/rstd
    assert counted.dtype == "bfloat16"


def test_backward_and_optimizer_work_is_counted_once() -> None:
    torch.manual_seed(3)
    layer = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = rand(32, 64)

    def step() -> None:
        opt.zero_grad()
        layer(x).sum().backward()
        opt.step()

    counted = count(step)
    assert counted.flops == 2 * 2 * 32 * 64 * 64  # forward and weight-gradient GEMMs (x needs no gradient)
    assert counted.bytes > 3 * (32 * 64 + 64 * 64) * F32
    assert dtype_class("float16", _cpu()) == "bfloat16"


def _cpu() -> object:
    from pytest_gpuperf.backends.cpu import CpuBackend

    return CpuBackend()


def _broad_ops() -> dict[str, Callable[[], object]]:
    """A broad set of ops a training step is made of, on small random tensors."""
    a, b = rand(64, 96), rand(96, 48, seed=1)
    batch = rand(4, 32, 16, seed=2)
    image = rand(2, 3, 16, 16, seed=3)
    weight = rand(8, 3, 3, 3, seed=4)
    table = rand(1000, 32, seed=5)
    index = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(6))
    q = rand(2, 2, 32, 16, seed=7)
    target = torch.randint(0, 48, (64,), generator=torch.Generator().manual_seed(8))
    logits = rand(64, 48, seed=9)
    params = [rand(32, 32, seed=10).requires_grad_(True)]
    params[0].grad = rand(32, 32, seed=11)
    adam = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    return {
        "mm": lambda: a @ b,
        "bmm": lambda: torch.bmm(batch, batch.transpose(1, 2)),
        "addmm": lambda: torch.addmm(rand(48), a, b),
        "conv2d": lambda: torch.nn.functional.conv2d(image, weight),
        "relu": lambda: torch.relu(a),
        "gelu": lambda: torch.nn.functional.gelu(a),
        "mul_scalar": lambda: a * 3,
        "add": lambda: a + a,
        "where": lambda: torch.where(a > 0, a, -a),
        "sum": lambda: a.sum(),
        "mean_dim": lambda: a.mean(dim=1),
        "max_dim": lambda: a.max(dim=0),
        "softmax": lambda: torch.softmax(a, dim=-1),
        "log_softmax": lambda: torch.log_softmax(a, dim=-1),
        "layer_norm": lambda: torch.nn.functional.layer_norm(a, (96,)),
        "rms_norm": lambda: torch.nn.functional.rms_norm(a, (96,)),
        "cross_entropy": lambda: torch.nn.functional.cross_entropy(logits, target),
        "embedding": lambda: torch.nn.functional.embedding(index, table),
        "index_select": lambda: table.index_select(0, index),
        "cat": lambda: torch.cat([a, a]),
        "transpose_contiguous": lambda: a.t().contiguous(),
        "clone": lambda: a.clone(),
        "to_bf16": lambda: a.to(torch.bfloat16),
        "cumsum": lambda: a.cumsum(0),
        "topk": lambda: a.topk(4, dim=1),
        "sort": lambda: a.sort(dim=1),
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q),
        "sdpa_causal": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
        "dropout": lambda: torch.nn.functional.dropout(a, p=0.1, training=True),
        "zeros": lambda: torch.zeros(64, 96),
        "adamw_step": adam.step,
    }


def _tensor_bytes_bound(step: Callable[[], object]) -> float:
    """An upper bound of any honest count: every distinct storage an op touches, read and written twice over."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    total = [0.0]

    class Bound(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            seen: dict[int, int] = {}
            for t in tree_flatten((args, kwargs or {}, out))[0]:
                if isinstance(t, torch.Tensor):
                    seen[id(t)] = t.untyped_storage().nbytes()
            total[0] += 2.0 * sum(seen.values())
            return out

    with Bound():
        step()
    return total[0]


@pytest.mark.parametrize("name", list(_broad_ops()))
def test_every_op_of_a_broad_set_counts_within_the_bytes_of_its_tensors(name: str) -> None:
    step = _broad_ops()[name]
    counted = count(step)
    assert counted.ops >= 1 and counted.bytes > 0
    assert counted.bytes <= _tensor_bytes_bound(_broad_ops()[name])
    assert counted.working_set <= counted.bytes
    assert sum(counted.bytes_by_op.values()) == pytest.approx(counted.bytes)
    if name in ("mm", "bmm", "addmm", "conv2d", "sdpa", "sdpa_causal"):
        assert counted.flops > 0
