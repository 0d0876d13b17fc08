"""``static`` (mix): fixed taskset proportions, given by taskset **name**.

Source: DataFlex-RL's static mixer. A plain fixed mix is a strong
baseline that many adaptive mixers fail to beat (Aioli, 2411.05735).

Keys are the ``name`` of each ``[[tasksets]]`` table; the pipeline calls :meth:`StaticMixer.bind` with the
names in taskset-id order, and the action's proportions are keyed by taskset id. Every taskset must be named
(give 0 to leave one out); the values are normalised to sum to 1. Without ``bind`` (a mixer used on its own),
keys that are integers (``"0"``, ``"1"``) are read as taskset ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from flexkit.config import field
from flexkit.config._converter import did_you_mean, path_key
from flexkit.errors import ConfigError, ConfigIssue, SampleError
from flexkit.sample._actuator import Actuator, Mix
from flexkit.sample._batch import RolloutBatch


@attrs.frozen(kw_only=True)
class StaticConfig:
    """Parameters of the ``static`` mixer."""

    proportions: dict[str, float] = field(
        doc="Share of each taskset, keyed by taskset name; values >= 0, normalised to sum to 1."
    )

    @proportions.validator
    def _check(self, _attribute: attrs.Attribute[dict[str, float]], value: dict[str, float]) -> None:
        if not value:
            raise ConfigError("must name at least one taskset")
        for key, p in value.items():
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
                raise ConfigError(f"proportion of {key!r} must be a finite number >= 0, got {p!r}")
        if not any(p > 0 for p in value.values()):  # not fsum: finite values near the float maximum overflow it
            raise ConfigError("proportions must not all be 0")


class StaticMixer(Actuator):
    """The configured proportions, every step (scores are ignored)."""

    Config = StaticConfig
    mechanism = "mix"
    accepts = ("domain", "prompt", "response", "token")

    def __init__(self, config: StaticConfig | None = None) -> None:
        super().__init__(config)
        self._by_id: dict[int, float] | None = None

    def bind(self, taskset_names: Sequence[str]) -> None:
        """Map the configured names to taskset ids; unknown or missing names raise :class:`ConfigError`."""
        names = list(taskset_names)
        issues = [
            ConfigIssue(f"proportions.{path_key(key)}", f"unknown taskset {key!r}{did_you_mean(key, names)}; tasksets: "
                        f"{', '.join(names)}")
            for key in self.config.proportions if key not in names
        ]
        missing = [n for n in names if n not in self.config.proportions]
        if missing:
            issues.append(ConfigIssue("proportions", f"no proportion for taskset(s) {', '.join(map(repr, missing))}; "
                                      "give every taskset a value (0 leaves one out)"))
        if issues:
            raise ConfigError(issues)
        self._by_id = {i: float(self.config.proportions[n]) for i, n in enumerate(names)}
        if not any(p > 0 for p in self._by_id.values()):
            raise ConfigError([ConfigIssue("proportions", "proportions must not all be 0")])

    def act(self, scores: Any, batch: RolloutBatch, *, step: int) -> Mix:
        """The configured mix, keyed by taskset id."""
        if self._by_id is None:
            try:
                self._by_id = {int(k): float(v) for k, v in self.config.proportions.items()}
            except ValueError:
                raise SampleError("the static mixer is keyed by taskset names: call bind(taskset_names) first "
                                  "(the pipeline does)") from None
        return Mix(self._by_id)
