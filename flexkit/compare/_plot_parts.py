"""Small pieces the comparison's text and figures share: writing a line to the report stream, legend labels, the
thousands axis, and a mean line with its interval band (used by :mod:`flexkit.compare._report` and
:mod:`flexkit.compare._level_plot`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

__all__ = ["band", "legend_label", "say", "thousands_axis"]


def say(stream: IO[str] | None, text: str) -> None:
    """Write one progress line to ``stream`` (nothing when it is ``None``)."""
    if stream is not None:
        stream.write(text + "\n")
        stream.flush()


def legend_label(name: str, runs: int, width: int = 40) -> str:
    """A plot legend's label for a setting: its name (cut to ``width`` characters) and run count."""
    return f"{name if len(name) <= width else name[:width - 1] + '…'} (n={runs})"


def thousands_axis(axis: Any) -> None:
    """Label a rollout axis in thousands (``200k``): raw six-digit ticks run into each other."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / 1000:g}k" if x else "0"))


def band(ax: Any, xs: Sequence[float], means: Sequence[float], halves: Sequence[float | None], *, label: str,
          color: Any = None, shade: bool = True) -> Any:
    """One mean curve with its shaded 95% band (with ``shade``); returns the line's colour."""
    (line,) = ax.plot(xs, means, label=label, color=color)
    widths = [h for h in halves if h is not None]
    if shade and xs and len(widths) == len(halves):  # every point has a half-width
        lo = [m - h for m, h in zip(means, widths, strict=True)]
        hi = [m + h for m, h in zip(means, widths, strict=True)]
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    return line.get_color()
