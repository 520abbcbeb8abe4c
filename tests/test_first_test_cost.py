"""What a first perf test must not pay for: imports and starts that no verdict of it needs (issue 22 item 1).

Each check runs in a fresh interpreter (what is imported is a property of the process), and asserts on
``sys.modules`` and on deterministic results, never on timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object, returned here."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_counting_a_step_does_not_import_dynamo_and_counts_the_same_as_with_it():
    """torch's dispatch-mode wrapper imports torch._dynamo at the first dispatch; a count must not pay for it."""
    found = _fresh(
        """
        import json, sys
        import torch
        from pytest_gpuperf.profiling.counting import count_step
        a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
        first = count_step(lambda: torch.tanh(a @ a) @ a, lambda: None)
        clean = "torch._dynamo" not in sys.modules
        import torch._dynamo  # the same count once dynamo is loaded (its own wrapper then disables tracing)
        again = count_step(lambda: torch.tanh(a @ a) @ a, lambda: None)
        print(json.dumps({"clean": clean, "first": [first.flops, first.bytes], "again": [again.flops, again.bytes]}))
        """
    )
    assert found["clean"], "count_step imported torch._dynamo"
    assert found["first"] == found["again"] == [2 * 2 * 64**3, found["first"][1]]
    assert found["first"][1] > 0


@pytest.mark.e2e
def test_counting_leaves_torch_dispatch_modes_as_it_found_them():
    """The mark that spares the import is removed after the count: dynamo, once loaded, disables the mode again."""
    found = _fresh(
        """
        import json
        import torch
        from torch.utils import flop_counter
        from pytest_gpuperf.profiling.counting import count_step
        a = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
        count_step(lambda: a @ a, lambda: None)
        raw = flop_counter._FlopCounterMode.__dict__["__torch_dispatch__"].__wrapped__
        print(json.dumps({"marked": hasattr(raw, "__dynamo_disable")}))
        """
    )
    assert found == {"marked": False}


@pytest.mark.e2e
def test_cpu_memory_pass_starts_no_dynamo_and_sees_the_step_allocations():
    """The CPU peak-memory pass records allocator events without torch.profiler's inductor check."""
    found = _fresh(
        """
        import json, sys
        import torch
        from pytest_gpuperf.backends.cpu_memory import measure_cpu_peak_bytes
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(2))
        peak = measure_cpu_peak_bytes(lambda: torch.tanh(a @ a) @ a)
        print(json.dumps({"peak": peak, "clean": "torch._dynamo" not in sys.modules}))
        """
    )
    assert found["clean"], "the CPU memory pass imported torch._dynamo"
    assert found["peak"] == 2 * 256 * 256 * 4  # a @ a and its tanh live together (float32); the result is the third


def test_a_run_no_verdict_of_which_needs_roofs_measures_none(pytester, fast_args):
    """No baseline, no update, no bound= marker, an empty cache: the first test measures no roofs (and says so)."""
    pytester.makepyfile(
        test_plain="""
        import torch

        def test_step(gpuperf):
            x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
            gpuperf.measure(lambda: x * 2)
        """
    )
    at = fast_args.index("no:cacheprovider")
    args = fast_args[: at - 1] + fast_args[at + 1 :]  # pytest's cache on: the roofs would live in it
    result = pytester.runpytest_subprocess("--gpuperf", "-v", *args, "test_plain.py")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "no bound class: this device's roofs are not measured yet" in text
    assert "measured roofs" not in text
    assert not list((pytester.path / ".pytest_cache" / "v").glob("gpuperf/roofs/*"))
