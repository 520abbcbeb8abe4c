"""The README's "Writing a perf test" example: its ``flops=`` hint is the work its step does (no counting error)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from pytest_gpuperf.profiling.counting import count_step


class _Handle:
    """What the example reads of the ``gpuperf`` fixture; ``measure`` keeps its arguments."""

    device = "cpu"

    def __init__(self) -> None:
        self.call: dict[str, Any] = {}

    def pick(self, cpu: Any = None, default: Any = None) -> Any:
        return cpu

    def measure(self, step: Any, **kwargs: Any) -> None:
        self.call = {"step": step, **kwargs}


def _example() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Writing a perf test", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_examples_flops_hint_is_the_counted_work() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_example(), "README.md", "exec"), namespace)  # the README's own code
    [test] = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    handle = _Handle()
    torch.manual_seed(0)
    test(handle)
    counted = count_step(handle.call["step"], lambda: None).flops
    hint = handle.call["flops"]
    assert re.search(r"flops=4 \* 1024 \* dim \* dim", _example())
    assert abs(hint / counted - 1.0) < 0.02, (hint, counted)  # a hint 1.5x the work reads as a counting error
