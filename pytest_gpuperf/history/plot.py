"""``gpuperf history --plot DIR``: one picture per series with its change points marked, and one HTML page.

Needs matplotlib (``pip install 'pytest-gpuperf[plot]'``). The page embeds every picture, so it is one
self-contained file to attach to a CI run.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from pytest_gpuperf.history.analysis import Finding
from pytest_gpuperf.history.render import short, step_text, write_text


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def _file_name(finding: Finding, taken: set[str]) -> str:
    """A file name made of the series' device, test and metric (safe characters only, unique in ``taken``)."""
    s = finding.series
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{s.device}__{s.test}__{s.metric}").strip("_")[:150] or "series"
    name, n = f"{stem}.png", 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}.png"
    taken.add(name)
    return name


def _draw(finding: Finding, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = finding.series
    xs = list(range(len(s.points)))
    figure, axes = plt.subplots(figsize=(8, 3.2), dpi=100)
    try:
        colors = ["tab:blue" if p.source == "baseline" else "tab:gray" for p in s.points]
        axes.plot(xs, [p.value for p in s.points], color="tab:blue", linewidth=1, zorder=1)
        axes.scatter(xs, [p.value for p in s.points], c=colors, s=14, zorder=2)
        for step in finding.steps:
            axes.axvspan(step.point.earliest - 0.5, step.point.latest - 0.5, color="tab:red", alpha=0.12)
            axes.axvline(step.point.index - 0.5, color="tab:red", linewidth=1.2)
        labels = [short(p.commit)[:7] for p in s.points]
        every = max(1, len(xs) // 12)
        axes.set_xticks(xs[::every], labels[::every], rotation=45, fontsize=7)
        axes.set_ylabel(s.unit or "value")
        axes.set_title(f"{s.test} {s.metric} ({s.device})", fontsize=8)
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)


def write_plots(findings: list[Finding], directory: Path) -> list[Path]:
    """One PNG per series under ``directory`` plus ``index.html`` embedding them all; the paths written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'pytest-gpuperf[plot]'") from exc
    directory.mkdir(parents=True, exist_ok=True)
    written, sections, taken = [], [], set()
    for finding in findings:
        path = directory / _file_name(finding, taken)
        _draw(finding, path)
        written.append(path)
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        s = finding.series
        caption = html.escape(f"{s.test} · {s.metric} · {s.device} · change points: {step_text(finding)}")
        sections.append(f'<figure><img src="data:image/png;base64,{encoded}" alt="{caption}"><figcaption>'
                        f"{caption}</figcaption></figure>")
    page = directory / "index.html"
    write_text(
        str(page),
        "<!doctype html><meta charset='utf-8'><title>gpuperf history</title>"
        "<style>body{font-family:sans-serif}figure{margin:1em 0}img{max-width:100%}</style>"
        f"<h1>gpuperf history</h1>{''.join(sections)}\n",
    )
    return [*written, page]
