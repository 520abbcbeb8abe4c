"""A user's project written from the README's "Use it in your project" section, run end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CONFTEST = """
import pytest, torch

class MyModel(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.layer = torch.nn.Linear(512, width)

    def forward(self, x):
        return self.layer(x)

@pytest.fixture(scope="module")
def model(gpuperf_device):                 # built once per module and backend (cuda, cpu ...)
    torch.manual_seed(0)
    return MyModel(WIDTH).to(gpuperf_device).eval()
"""

TEST = """
import pytest, torch

@pytest.mark.parametrize("batch", [1, 64])   # ids: test_forward[1-cuda], test_forward[64-cuda]
@pytest.mark.gpuperf(memory_tolerance=0.02, time_tolerance={"cuda": 0.10}, informational={"cpu": "bound"})
def test_forward(gpuperf, model, batch):
    x = torch.randn(batch, 512, device=gpuperf.device)
    with torch.no_grad():
        gpuperf.measure(lambda: model(x), items=batch, unit="samples")
"""


def test_a_project_from_the_readme_records_passes_unchanged_and_fails_a_bigger_model_with_a_one_line_reason(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    pytester.makeconftest("WIDTH = 2048\n" + CONFTEST)
    # the README's test; on this shared CPU the bound class of a batch-1 Linear follows the machine's load, so
    # the test makes it informational on the cpu backend (the README's example has no such setting)
    pytester.makepyfile(test_model_perf=TEST)
    assert pytester.runpytest("--help").ret == 0
    # time is not what this test is about: a loaded runner must not decide it
    args = [*fast_args, "-o", "gpuperf_cpu_time_tolerance=100"]

    recorded = pytester.runpytest("--gpuperf", "--gpuperf-update", *args)
    recorded.assert_outcomes(passed=2)
    [baseline] = (pytester.path / "baselines").glob("cpu-*-ws1.yaml")
    assert "test_model_perf.py::test_forward[64-cpu]" in baseline.read_text()

    unchanged = pytester.runpytest("--gpuperf", *args)
    unchanged.assert_outcomes(passed=2)
    unchanged.stdout.fnmatch_lines(["gpuperf: 2 tests, * metrics: * ok*"])

    pytester.makeconftest("WIDTH = 4096\n" + CONFTEST)  # twice the output activations: twice the peak memory
    bigger = pytester.runpytest("--gpuperf", *args, "test_model_perf.py::test_forward[64-cpu]")
    bigger.assert_outcomes(failed=1)
    # twice the width is twice the work: said first, the peak memory beside it
    bigger.stdout.fnmatch_lines(
        ["FAILED test_model_perf.py::test_forward[[]64-cpu[]] - the step now does 2x the work (flops per step *"]
    )
    bigger.stdout.fnmatch_lines(["*peak memory +100.0% > +2.0% (512.00 KiB -> 1.00 MiB)*"])


def test_the_readme_gitignore_snippet_ignores_what_it_names(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("```gitignore\n", 1)[1].split("```", 1)[0]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(snippet)
    paths = ["gpuperf-artifacts/trace.json", "gpuperf-reports/perf.md", ".pytest_cache/v/cache/lastfailed"]
    paths.append(".benchmarks/Linux-CPython-3.11-64bit")
    ignored = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "--no-index", *paths], capture_output=True, text=True
    ).stdout.split()
    assert ignored == paths
