"""Charts as inline SVG, laid out in Python: no JavaScript library to vendor, and a file that opens offline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

# Colour-blind-safe palette (Okabe and Ito), cycled when a chart has more series than colours.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
WIDTH = 640
HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 12, 46
MARKER_LIMIT = 40  # points drawn as dots (with a tooltip) only while a series is this short


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [low, high]."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = [round(first, 12)]
    while ticks[-1] < high - step * 1e-9:  # the last tick at or past the highest value: nothing overflows
        ticks.append(round(first + len(ticks) * step, 12))
    return ticks


def format_number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    if magnitude >= 1:
        return f"{value:.4g}"
    # Three significant digits as fixed decimals: 0.0000188, never 1.88e-05.
    return f"{value:.{2 - math.floor(math.log10(magnitude))}f}".rstrip("0").rstrip(".")


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    colour: str
    step: bool = False  # a histogram-like series: flat across each x interval
    # (x, low, high): a 95% confidence interval drawn as an error bar at that x (a series of means over repeats)
    errors: list[tuple[float, float, float]] = field(default_factory=list)


@dataclass
class Axis:
    label: str
    ticks: list[float]

    @property
    def low(self) -> float:
        return self.ticks[0]

    @property
    def high(self) -> float:
        return self.ticks[-1]


@dataclass
class Path:
    d: str
    colour: str
    name: str
    markers: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass
class Rule:
    """A horizontal reference line across the plot (a budget), with its label."""

    y: float
    label: str
    colour: str


@dataclass
class Chart:
    """Everything the template needs to draw one chart; coordinates are in SVG user units."""

    key: str
    title: str
    x_axis: Axis
    y_axis: Axis
    paths: list[Path] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    x_labels: list[tuple[float, str]] = field(default_factory=list)  # category labels of a bar chart
    width: int = WIDTH
    height: int = HEIGHT
    empty: bool = False
    x_log: bool = False  # positions by log10(x); the ticks are the values themselves
    rules: list[Rule] = field(default_factory=list)
    highlights: list[tuple[float, float, str]] = field(default_factory=list)  # (svg x, svg y, label): marked points
    # (svg x, svg y of the low end, svg y of the high end, colour, tip): error bars of the series' intervals
    error_bars: list[tuple[float, float, float, str, str]] = field(default_factory=list)

    @property
    def plot(self) -> tuple[int, int, int, int]:
        return LEFT, TOP, self.width - LEFT - RIGHT, self.height - TOP - BOTTOM

    def sx(self, x: float) -> float:
        left, _, width, _ = self.plot
        low, high = self.x_axis.low, self.x_axis.high
        if self.x_log:
            x, low, high = math.log10(x), math.log10(low), math.log10(high)
        span = high - low or 1.0
        return round(left + (x - low) / span * width, 2)

    def sy(self, y: float) -> float:
        _, top, _, height = self.plot
        span = self.y_axis.high - self.y_axis.low or 1.0
        return round(top + height - (y - self.y_axis.low) / span * height, 2)

    @property
    def x_ticks(self) -> list[tuple[float, str]]:
        return [(self.sx(tick), format_number(tick)) for tick in self.x_axis.ticks]

    @property
    def y_ticks(self) -> list[tuple[float, str]]:
        return [(self.sy(tick), format_number(tick)) for tick in self.y_axis.ticks]


def line_chart(
    key: str,
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    *,
    y_from_zero: bool = True,
    x_from_zero: bool = False,
    x_log: bool = False,
    rules: Sequence[Rule] = (),
    highlights: Sequence[tuple[float, float, str]] = (),
) -> Chart:
    """``x_log``: a log-scale x axis ticked at the points' own x values (all positive), as a batch-size sweep's
    doublings read evenly; ``rules``: horizontal lines the y axis stretches to hold; ``highlights``: (x, y,
    label) points marked with a ring."""
    xs = [x for s in series for x, _ in s.points]
    ys = (
        [y for s in series for _, y in s.points]
        + [rule.y for rule in rules]
        + [bound for s in series for _, low, high in s.errors for bound in (low, high)]
    )
    if not xs:
        return Chart(key, title, Axis(x_label, [0.0, 1.0]), Axis(y_label, [0.0, 1.0]), empty=True)
    # Throughput and counts read against zero; a zoomed-in axis would exaggerate small differences.
    y_low = min(0.0, *ys) if y_from_zero else min(ys)
    if x_log:
        if min(xs) <= 0:
            raise ValueError(f"{key}: a log scale needs positive x values")
        x_axis = Axis(x_label, _log_ticks(sorted(set(xs))))
    else:
        x_low = min(0.0, *xs) if x_from_zero else min(xs)
        x_axis = Axis(x_label, nice_ticks(x_low, max(xs)))
    chart = Chart(key, title, x_axis, Axis(y_label, nice_ticks(y_low, max(ys))), x_log=x_log, rules=list(rules))
    chart.highlights = [(chart.sx(x), chart.sy(y), label) for x, y, label in highlights]
    for s in series:
        chart.legend.append((s.name, s.colour))
        if not s.points:
            continue
        commands = []
        for index, (x, y) in enumerate(s.points):
            if s.step and index > 0:
                commands.append(f"L{chart.sx(x)},{chart.sy(s.points[index - 1][1])}")
            commands.append(f"{'M' if index == 0 else 'L'}{chart.sx(x)},{chart.sy(y)}")
        markers = []
        if len(s.points) <= MARKER_LIMIT and not s.step:
            markers = [
                (chart.sx(x), chart.sy(y), f"{s.name}: {format_number(x)}, {format_number(y)}") for x, y in s.points
            ]
        chart.paths.append(Path(" ".join(commands), s.colour, s.name, markers))
        chart.error_bars += [
            (
                chart.sx(x),
                chart.sy(low),
                chart.sy(high),
                s.colour,
                f"{s.name}: {format_number(x)}, 95% CI {format_number(low)} to {format_number(high)}",
            )
            for x, low, high in s.errors
        ]
    return chart


def _log_ticks(values: list[float], limit: int = 12) -> list[float]:
    """The values themselves, thinned evenly to at most ``limit`` (the first and last always kept)."""
    if len(values) == 1:
        return [values[0] / 2, values[0], values[0] * 2]
    if len(values) <= limit:
        return values
    step = math.ceil((len(values) - 1) / (limit - 1))
    return [*values[:-1:step], values[-1]]


def bar_chart(
    key: str,
    title: str,
    x_label: str,
    y_label: str,
    categories: Sequence[str],
    groups: Sequence[tuple[str, str, Sequence[float]]],
) -> Chart:
    """Grouped bars: one group per category, one bar per (name, colour, values) entry in ``groups``."""
    values = [value for _, _, group_values in groups for value in group_values]
    if not categories or not values:
        return Chart(key, title, Axis(x_label, [0.0, 1.0]), Axis(y_label, [0.0, 1.0]), empty=True)
    chart = Chart(key, title, Axis(x_label, [0.0, float(len(categories))]), Axis(y_label, nice_ticks(0, max(values))))
    slot = 1.0 / (len(groups) + 1)
    for group_index, (name, group_colour, group_values) in enumerate(groups):
        chart.legend.append((name, group_colour))
        for index, value in enumerate(group_values):
            left = chart.sx(index + slot * (group_index + 0.5))
            right = chart.sx(index + slot * (group_index + 1.5))
            top = chart.sy(value)
            chart.bars.append(
                Bar(
                    left,
                    top,
                    max(right - left, 1.0),
                    chart.sy(0) - top,
                    group_colour,
                    f"{name}: {categories[index]} → {format_number(value)}",
                )
            )
    chart.x_labels = [(chart.sx(index + 0.5), category) for index, category in enumerate(categories)]
    return chart
