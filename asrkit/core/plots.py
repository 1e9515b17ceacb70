"""PNG plots of datasets and runs, for ``asrkit describe --plots DIR``.

Each function takes plain Python data (lists, dicts) and writes one PNG; it returns the path, or
None when there is nothing to draw (a run without dev evaluations has no dev-loss plot).
matplotlib is imported inside the functions, with the non-interactive Agg canvas and no pyplot
(no display, no global figure state), so importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Figure size (inches) and resolution: 1000 x 600 pixels.
FIGSIZE, DPI = (10, 6), 100
#: Histogram bins at most (fewer for few values).
MAX_BINS = 50


def _figure() -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _save(figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def histograms(values: Mapping[str, Sequence[float]], path: Path, title: str,
               xlabel: str) -> Path | None:
    """One histogram per series (e.g. per split), drawn over one another on shared bins."""
    series = {name: list(v) for name, v in values.items() if v}
    if not series:
        return None
    everything = [x for v in series.values() for x in v]
    low, high = min(everything), max(everything)
    bins = max(1, min(MAX_BINS, len(everything)))
    edges = [low + (high - low) * i / bins for i in range(bins + 1)] if high > low else bins
    figure, axes = _figure()
    for name, v in series.items():
        axes.hist(v, bins=edges, alpha=0.6, label=f"{name} ({len(v)})", edgecolor="black",
                  linewidth=0.5)
    axes.set(title=title, xlabel=xlabel, ylabel="utterances")
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.legend()
    axes.grid(alpha=0.3)
    return _save(figure, path)


def curves(series: Mapping[str, Sequence[tuple[float, float]]], path: Path, title: str,
           ylabel: str, xlabel: str = "step", percent: bool = False,
           log_y: bool = False) -> Path | None:
    """Lines of ``(x, y)`` points, one per named series; a lone point is drawn as a marker."""
    series = {name: sorted(points) for name, points in series.items() if points}
    if not series:
        return None
    figure, axes = _figure()
    for name, points in series.items():
        xs = [x for x, _ in points]
        ys = [y * 100 if percent else y for _, y in points]
        axes.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=4, label=name)
    axes.set(title=title, xlabel=xlabel, ylabel=f"{ylabel} (%)" if percent else ylabel)
    if xlabel == "step":
        axes.xaxis.get_major_locator().set_params(integer=True)
    if log_y and all(y > 0 for points in series.values() for _, y in points):
        axes.set_yscale("log")
    axes.legend()
    axes.grid(alpha=0.3)
    return _save(figure, path)


def scatter(points: Sequence[tuple[float, float]], path: Path, title: str, xlabel: str,
            ylabel: str, percent: bool = False) -> Path | None:
    """A scatter of ``(x, y)`` points (e.g. an utterance's duration and its WER)."""
    if not points:
        return None
    figure, axes = _figure()
    axes.scatter([x for x, _ in points], [y * 100 if percent else y for _, y in points],
                 alpha=0.6, edgecolors="black", linewidths=0.5)
    axes.set(title=title, xlabel=xlabel, ylabel=f"{ylabel} (%)" if percent else ylabel)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    return _save(figure, path)
