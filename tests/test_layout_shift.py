"""The heap shift between CPU samples (pytest_gpuperf.timing.layout): sizes, and that the loop uses it."""

from __future__ import annotations

import random

import torch

from pytest_gpuperf.timing.layout import LINE, MAX_SPACER, shifted, spacer_bytes


def test_spacers_are_whole_lines_below_the_cap_and_vary() -> None:
    rng = random.Random(0)
    sizes = [spacer_bytes(rng) for _ in range(200)]
    assert all(size % LINE == 0 and LINE <= size < MAX_SPACER for size in sizes)
    assert len(set(sizes)) > 150  # a different offset almost every sample


def test_a_shifted_take_holds_a_spacer_during_the_call_and_frees_it_after(monkeypatch) -> None:
    held: list[int] = []
    real_empty = torch.empty

    def empty(*args, **kwargs):
        tensor = real_empty(*args, **kwargs)
        held.append(tensor.numel())
        return tensor

    monkeypatch.setattr(torch, "empty", empty)
    take = shifted(lambda: 0.25, seed=1)
    assert [take() for _ in range(3)] == [0.25, 0.25, 0.25]  # the timed value passes through untouched
    assert len(held) == 3 and all(n % LINE == 0 for n in held)


def test_the_cpu_loop_shifts_the_heap_and_says_so_and_can_be_told_not_to() -> None:
    from dataclasses import replace

    from pytest_gpuperf.backends import get_backend
    from pytest_gpuperf.timing import MeasureConfig, measure_time

    cpu = get_backend("cpu")
    x = torch.randn(1024)
    config = MeasureConfig(max_time=0.05, warmup_time=0.0, min_samples=3)
    result = measure_time(cpu, lambda: x * 2.0, config)
    assert result.layout_shifted and result.summary()["layout_shifted"] is True
    plain = measure_time(cpu, lambda: x * 2.0, replace(config, shift_layout=False))
    assert not plain.layout_shifted and "layout_shifted" not in plain.summary()


def test_the_heap_thresholds_are_fixed_once_per_process_where_glibc_has_mallopt() -> None:
    import ctypes.util
    import sys

    from pytest_gpuperf.timing import layout

    first = layout.steady_heap()
    assert layout.steady_heap() is first  # set once, remembered
    if sys.platform.startswith("linux") and ctypes.util.find_library("c"):
        assert first is True
