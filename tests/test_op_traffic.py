"""The byte-counting dispatch mode on its own: what one op adds to its totals, per op and per storage."""

from __future__ import annotations

import torch

from pytest_gpuperf.profiling.op_traffic import OpTraffic, storage_key, tensor_bytes

F32 = 4
N = 4096


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    """Random data (never zeros)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_an_out_of_place_op_reads_its_inputs_and_writes_its_output_once_each() -> None:
    a, b = rand(N), rand(N, seed=1)
    with OpTraffic() as traffic:
        c = a + b
    assert (traffic.ops, traffic.bytes) == (1, 3 * N * F32)
    assert traffic.by_op == {"add": 3 * N * F32}
    assert traffic.storages == {storage_key(t): N * F32 for t in (a, b, c)}


def test_an_in_place_op_reads_and_writes_its_target_and_is_not_counted_again_as_its_output() -> None:
    a, b = rand(N), rand(N, seed=1)
    with OpTraffic() as traffic:
        a.add_(b)
    assert (traffic.ops, traffic.bytes) == (1, 2 * N * F32 + N * F32)


def test_views_and_allocations_are_not_ops_that_move_bytes() -> None:
    x = rand(64, 64)
    with OpTraffic() as traffic:
        x.view(-1)
        x.t()
        torch.empty(N)
    assert (traffic.ops, traffic.bytes, traffic.by_op, traffic.storages) == (0, 0.0, {}, {})


def test_a_broadcast_or_repeated_operand_counts_its_storage_once_and_the_matmul_dtype_is_kept() -> None:
    row, m = rand(64), rand(64, 64, seed=1)
    expanded = row.expand(64, 64)
    assert tensor_bytes(expanded) == 64 * F32
    with OpTraffic() as traffic:
        m @ m
        _ = m * expanded
    assert traffic.by_op["mul"] == (64 * 64 + 64 + 64 * 64) * F32
    assert traffic.matmul_dtypes == {"float32": 2 * 64 * 64 * F32}  # m read once (one distinct input) + the output
    assert traffic.ops == 2 and traffic.extra_flops == 0.0 and traffic.causal_removed == 0.0


def test_counting_stops_when_the_mode_is_left() -> None:
    a = rand(N)
    with OpTraffic() as traffic:
        a.sum()
    counted = (traffic.ops, traffic.bytes)
    a.sum()
    assert counted == (traffic.ops, traffic.bytes) and traffic.ops == 1
