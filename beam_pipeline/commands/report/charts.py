"""Bar-chart geometry for inline SVG: numbers in, rows with a width and a tooltip out.

The page draws each chart as SVG rectangles with a <title> (the number on hover) and prints
the number beside the bar too, so nothing depends on JavaScript.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

BAR_AREA = 420  # pixels of the longest bar


@dataclasses.dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # the number as printed beside the bar
    width: float  # pixels
    colour: str


@dataclasses.dataclass(frozen=True)
class Chart:
    title: str
    bars: tuple[Bar, ...]

    @property
    def height(self) -> int:
        return 22 * len(self.bars) + 4


def bar_chart(
    title: str,
    items: Sequence[tuple[str, float]],
    *,
    fmt: str = "{:,}",
    colours: Sequence[str] | None = None,
) -> Chart:
    peak = max((value for _, value in items), default=0) or 1
    bars = tuple(
        Bar(
            label,
            value,
            fmt.format(value),
            BAR_AREA * value / peak,
            colours[index] if colours else "#4a7bd0",
        )
        for index, (label, value) in enumerate(items)
    )
    return Chart(title, bars)
