"""A grown peak names its allocation sites: the user's file and line, and the op."""

from __future__ import annotations

import inspect

import pytest
import torch

from pytest_gpuperf.profiling.memory_sites import allocation_sites, user_frame


def test_the_sites_name_the_allocating_line_and_op_largest_first() -> None:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))

    def step() -> torch.Tensor:
        big = torch.ones(1 << 20)  # 4 MiB of new storage
        flat = x.view(-1)  # a view: no storage of its own
        return big.sum() + (x @ x).sum() + flat.sum()

    first = inspect.getsourcelines(step)[1]
    sites = allocation_sites(step)
    assert sites[0] == f"test_memory_sites.py:{first + 1} ones 4.00 MiB"
    assert not any("view" in site for site in sites)
    assert any(site.startswith(f"test_memory_sites.py:{first + 3} mm ") for site in sites)


def test_library_frames_are_skipped() -> None:
    frames = [("/x/site-packages/torch/nn/modules/linear.py", 125), ("/proj/tests/test_a.py", 12)]
    assert user_frame(frames) == "test_a.py:12"
    assert user_frame([("<frozen runpy>", 1)]) == ""


PERF_TEST = """
import torch

ALLOC_MIB = {alloc}


def test_alloc(gpuperf):
    gen = torch.Generator().manual_seed(0)

    def step():
        scratch = torch.rand(ALLOC_MIB * 262144, generator=gen)
        return scratch.sum()

    gpuperf.measure(step)
"""


def test_a_step_allocating_16_mib_more_fails_naming_the_line(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_perf=PERF_TEST.format(alloc=1))
    pytester.runpytest("--gpuperf-update", *fast_args).assert_outcomes(passed=1)
    pytester.makepyfile(test_perf=PERF_TEST.format(alloc=17))
    result = pytester.runpytest("--gpuperf", *fast_args, "-o", "gpuperf_cpu_time_tolerance=5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*peak memory*largest allocations of one step: test_perf.py:10 rand 17.00 MiB*"])
