"""How well a selector's predicted pass rates agree with scores it never learnt from: per group, the mean
prediction beside the mean score (a reliability diagram's points, DeGroot & Fienberg 1983), and over every row the
Spearman rank correlation between prediction and score.

A selector that predicts pass rates from a row's columns (``frontier``'s ``text_key`` model) is checked this way on
a validation split (:meth:`~flexkit.Selector.validation_calibration`): rows it was never fed, so a model that only
memorised its feedback would show no agreement.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["average_ranks", "binned_calibration", "rank_correlation"]


def average_ranks(values: np.ndarray) -> np.ndarray:
    """The rank of each value (0-based), tied values sharing the mean of their ranks."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    ends = np.concatenate([starts[1:], [len(values)]])
    mean_rank = (starts + ends - 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def rank_correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (Pearson's of their average ranks); NaN when either is
    constant or has fewer than 2 values."""
    if len(x) < 2:
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    norm = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / norm) if norm > 0 else float("nan")


def binned_calibration(predicted: np.ndarray, scores: np.ndarray, bins: np.ndarray,
                       names: Sequence[str]) -> dict[str, float]:
    """Per group ``names[g]`` that holds rows (``bins == g``): ``val_predicted/<name>`` (the rows' mean
    prediction), ``val_observed/<name>`` (their mean score) and ``val_rows/<name>`` (how many); and over every row
    ``val_rank_correlation`` (:func:`rank_correlation`, left out where it is undefined) and ``val_rows``."""
    out: dict[str, float] = {"val_rows": float(len(scores))}
    counts = np.bincount(bins, minlength=len(names))
    sum_predicted = np.bincount(bins, weights=predicted, minlength=len(names))
    sum_scores = np.bincount(bins, weights=scores, minlength=len(names))
    for g, name in enumerate(names):
        if counts[g]:
            out[f"val_predicted/{name}"] = float(sum_predicted[g] / counts[g])
            out[f"val_observed/{name}"] = float(sum_scores[g] / counts[g])
            out[f"val_rows/{name}"] = float(counts[g])
    correlation = rank_correlation(predicted, scores)
    if np.isfinite(correlation):
        out["val_rank_correlation"] = correlation
    return out
