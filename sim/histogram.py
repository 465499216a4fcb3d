"""Text histograms for the terminal, and PNG figures when matplotlib (``corral[plot]``) is there.

matplotlib is imported only inside `require_matplotlib`, so the package works without it;
`PlotUnavailable` carries the one message the CLI shows when it is missing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from corral.common.errors import CorralError

BAR = "█"


class PlotUnavailable(CorralError):
    """--plot was asked for but matplotlib is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "--plot needs matplotlib, which is not installed: pip install 'corral[plot]'"
        )


def text_histogram(
    values: Sequence[float], bins: int = 12, width: int = 40, fmt: str = "{:.3g}"
) -> list[str]:
    """Lines of a horizontal histogram of ``values``: a range and a bar per bin, the bar as
    long as the bin's count relative to the fullest bin. Integers get whole-number bins
    (``15–17`` holds 15, 16 and 17; a single value when each bin holds one)."""
    if not values:
        return ["(no values)"]
    low, high = min(values), max(values)
    if all(float(v).is_integer() for v in values):
        step: float = max(1, math.ceil((high - low + 1) / bins))
        count = int((high - low) // step) + 1
        labels = [
            f"{low + i * step:g}"
            if step == 1
            else f"{low + i * step:g}–{low + i * step + step - 1:g}"
            for i in range(count)
        ]
    else:
        if high == low:
            return [f"{fmt.format(low)} │{BAR * width} {len(values)}"]
        step = (high - low) / bins
        count = bins
        labels = [f"{fmt.format(low + i * step)}–{fmt.format(low + (i + 1) * step)}"
                  for i in range(count)]  # fmt: skip
    counts = [0] * count
    for v in values:
        counts[min(int((v - low) / step), count - 1)] += 1
    fullest = max(counts)
    pad = max(len(s) for s in labels)
    return [
        f"{label:>{pad}} │{BAR * (max(1, round(width * c / fullest)) if c else 0):<{width}} {c}"
        for label, c in zip(labels, counts, strict=True)
    ]


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` with a file-only backend, or `PlotUnavailable`."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable() from None
    matplotlib.use("Agg")  # no display needed: we only write files
    import matplotlib.pyplot as plt

    return plt


def plot_bars(
    path: str,
    panels: Mapping[str, Sequence[float]],
    ylabel: str,
    xlabel: str = "backend",
    mean_line: bool = True,
) -> None:
    """One bar chart per panel (a value per backend, like the chapter's figures), stacked."""
    plt = require_matplotlib()
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 2.6 * len(panels)), squeeze=False, sharex=True
    )
    for ax, (title, values) in zip(axes[:, 0], panels.items(), strict=True):
        ax.bar(range(len(values)), values, width=1.0, color="#4878a8")
        if mean_line and values:
            ax.axhline(sum(values) / len(values), color="#c44", linewidth=1, label="mean")
            ax.legend(loc="upper right", fontsize="small")
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(ylabel)
    axes[-1, 0].set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_points(
    path: str, points: Mapping[str, tuple[float, float]], title: str, xlabel: str, ylabel: str
) -> None:
    """One labelled point per entry (e.g. an algorithm's spread against its churn)."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, (x, y) in points.items():
        ax.scatter([x], [y], color="#4878a8")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize="small")
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

