"""Numbers and the list beside the roofline plot: every point gets a number, no two labels overlap."""

from __future__ import annotations

from typing import Any, Protocol

from pytest_gpuperf.results import FAILING_STATUSES


class RooflinePoint(Protocol):
    """What the labels need of a plotted point (:class:`pytest_gpuperf.reporting.plot.RooflinePoint`)."""

    intensity: float
    flop_rate: float
    status: str
    bound: str | None
    flag: str

    @property
    def label(self) -> str:
        """The point's short name."""
        ...


#: Where a point's number may go, in points from the marker: right/left, above/below, then further out.
_LABEL_SPOTS = [
    (dx * side, dy, "left" if side > 0 else "right", "bottom" if dy > 0 else "top")
    for dx, dy in ((7, 4), (7, -4), (7, 16), (7, -16), (7, 28), (7, -28), (18, 0))
    for side in (1, -1)
]


def numbered(points: list[RooflinePoint]) -> list[tuple[int, RooflinePoint]]:
    """The points numbered 1..N: regressions and changed bounds first, then by intensity."""
    ordered = sorted(points, key=lambda p: (p.status not in FAILING_STATUSES, p.intensity, p.label))
    return list(enumerate(ordered, start=1))


#: Longest step name in the list beside the plot.
LABEL_WIDTH = 36


def legend_lines(points: list[RooflinePoint]) -> list[str]:
    """One line per numbered point (its name and bound class), and a second for a counting-error flag."""
    lines = []
    for number, point in numbered(points):
        label = point.label if len(point.label) <= LABEL_WIDTH else point.label[: LABEL_WIDTH - 3] + "..."
        text = f"{number:>2}  {label}"
        if point.bound:
            text += f" - {point.bound}"
        lines.append(text)
        if point.flag:  # on its own line, so the list stays beside the plot
            lines.append(f"    ^ {point.flag}: over its roof, not a measurement")
    return lines


def number_ranges(numbers: list[int]) -> str:
    """``[3, 4, 16, 17, 18]`` -> ``"3,4,16-18"`` (runs of three or more become a range)."""
    parts: list[str] = []
    run: list[int] = []
    for number in [*sorted(numbers), -1]:
        if run and number == run[-1] + 1:
            run.append(number)
            continue
        if len(run) >= 3:
            parts.append(f"{run[0]}-{run[-1]}")
        else:
            parts += [str(n) for n in run]
        run = [number]
    return ",".join(parts)


def place_numbers(fig: Any, ax: Any, points: list[RooflinePoint]) -> None:
    """Write each point's number beside it where it overlaps no marker or earlier number.

    Points that land on the same spot on screen share one label (``3,4``), so a number
    always has somewhere to go.
    """
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    groups: list[tuple[tuple[float, float], list[int], RooflinePoint]] = []
    for number, point in numbered(points):
        x, y = ax.transData.transform((point.intensity, point.flop_rate))
        for (gx, gy), numbers, _ in groups:
            if abs(gx - x) < 9 and abs(gy - y) < 9:
                numbers.append(number)
                break
        else:
            groups.append(((x, y), [number], point))
    placed = [Bbox.from_extents(x - 7, y - 7, x + 7, y + 7) for (x, y), _, _ in groups]
    for _, numbers, point in groups:
        bad = point.status in FAILING_STATUSES or bool(point.flag)
        text = number_ranges(numbers)
        for dx, dy, ha, va in _LABEL_SPOTS:
            note = ax.annotate(
                text,
                (point.intensity, point.flop_rate),
                xytext=(dx, dy),
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=8.5,
                fontweight="bold",
                color="#b00000" if bad else "#222222",
                zorder=6,
            )
            box = note.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            note.remove()  # every spot taken: the list beside the plot still names the point
