"""The optional members of a selector, read in one place: declared on :class:`~flexkit.Selector`
(each a documented default there), so a host calls them on a ``Selector`` without asking whether they exist. A
plugin selector that does not derive from the base (a duck-typed object with ``get_indices``, ``feedback`` and the
state methods) is asked here, and only here, which of them it has
(:func:`~flexkit.plugins._contract.optional_member`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexkit.plugins._contract import ValidationRows, call_declared, optional_member
from flexkit.selectors._base import Selector

__all__ = ["flag", "observe_evaluation", "predicted_pass_rates", "summary", "validation_calibration"]

_FLAGS = ("allows_repeats", "repeats_across_epochs", "learns_from_feedback", "keeps_feature_dtypes",
          "atomic_feedback")
#: Older names of the pass-rate estimate a duck-typed selector may have, in the order they are tried.
_ESTIMATE_METHODS = ("predicted_pass_rates", "estimates", "posterior_mean")


def flag(selector: Any, name: str) -> bool:
    """The flag ``name`` (one of :class:`~flexkit.Selector`'s) of ``selector`` (or of a selector
    factory, for ``keeps_feature_dtypes``), read from the
    object (``atomic_feedback`` from its class, which declares it for its own feedback code); ``False`` for a
    foreign selector that does not set it (``atomic_feedback`` only when exactly ``True``: a foreign selector's
    feedback is not trusted to be atomic). An exception a property raises (a plugin's own bug) surfaces as it is."""
    if name not in _FLAGS:
        raise ValueError(f"{name!r} is not a selector flag ({', '.join(_FLAGS)})")
    owner = type(selector) if name == "atomic_feedback" else selector
    value = optional_member(owner, name, False)  # declared on the base: always there on a Selector
    if isinstance(selector, Selector):
        return bool(value)
    return value is True if name == "atomic_feedback" else bool(value)


def predicted_pass_rates(selector: Any) -> Any:
    """The selector's per-task pass-rate estimate (unchecked; ``None``: it keeps none)."""
    if isinstance(selector, Selector):
        return selector.predicted_pass_rates()
    for method in _ESTIMATE_METHODS:
        found = optional_member(selector, method)
        if callable(found):
            return found()
    posterior = optional_member(selector, "posterior")
    if callable(posterior):
        alpha, beta = posterior()
        return np.asarray(alpha, dtype=np.float64) / (np.asarray(alpha) + np.asarray(beta))
    return None


def summary(selector: Any) -> Mapping[str, Any]:
    """The selector's summary numbers (empty when it gives none)."""
    if isinstance(selector, Selector):
        return selector.summary()
    found = optional_member(selector, "summary")
    return dict(found()) if callable(found) else {}


def observe_evaluation(selector: Any, metrics: Mapping[str, float]) -> None:
    """Hand ``selector`` an evaluation (a foreign selector without ``observe_evaluation`` does not take one)."""
    call_declared(selector, Selector, "observe_evaluation", metrics)


def validation_calibration(selector: Any, rows: ValidationRows) -> dict[str, Any]:
    """The selector's predictions of validation ``rows`` held against their scores
    (:meth:`~flexkit.Selector.validation_calibration`; ``{}`` from a foreign selector without the method)."""
    if isinstance(selector, Selector):
        return selector.validation_calibration(rows)
    found = optional_member(selector, "validation_calibration")
    return dict(found(rows)) if callable(found) else {}
