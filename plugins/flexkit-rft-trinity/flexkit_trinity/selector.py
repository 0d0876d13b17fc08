"""``FlexkitSelector``: any flexkit selector as a Trinity-RFT data selector.

Trinity-RFT's ``TaskFileReader`` builds the class named by ``data_selector.selector_type`` as
``cls(data_source, config)`` (``data_source``: its ``_HFBatchReader``, with the Hugging Face dataset and its size;
``config``: the ``DataSelectorConfig``), then its ``TasksetScheduler`` calls ``get_indices(batch_size)`` every step
and ``feedback(indices, values)`` with each task's mean reward (Trinity's ``pass_rate_calculator``). The reader's
``state_dict()`` *is* its selector's, and Trinity-RFT's explorer saves it as JSON in its checkpoint
(``<explorer>_meta.json``, ``taskset_states``), so this class returns the flexkit selector's whole state there
(estimates, RNG, position), JSON-encoded by :mod:`flexkit_trinity.state`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from trinity.buffer.selector.selector import BaseSelector

from flexkit import FEATURE_KEYS, CheckpointError, ConfigError, ConfigIssue, TasksetError, feature_keys_of
from flexkit.host import selector_needs, unmet_needs
from flexkit_trinity import state as state_codec
from flexkit_trinity.config import selector_spec
from flexkit_trinity.metrics import register_live, selector_metrics_of
from flexkit_trinity.support import SUPPORT

__all__ = ["STATE_KEY", "FlexkitSelector"]

#: The key of the flexkit state inside the reader's state dict (next to Trinity's ``current_index``).
STATE_KEY = "flexkit"

_log = logging.getLogger(__name__)


class FlexkitSelector(BaseSelector):
    """A Trinity-RFT selector running the flexkit selector named in ``data_selector.kwargs.selector``.

    Args:
        data_source: Trinity-RFT's batch reader of the taskset (``dataset``, ``dataset_size``, ``name``).
        config: Trinity-RFT's ``DataSelectorConfig`` (see :mod:`flexkit_trinity.config`).

    Raises:
        flexkit.errors.ConfigError: bad parameters or feature columns, with key paths, naming the taskset.
    """

    def __init__(self, data_source: Any, config: Any) -> None:
        super().__init__(data_source, config)
        self.taskset_name = str(getattr(data_source, "name", "") or "")
        where = f"taskset {self.taskset_name!r}" if self.taskset_name else None
        try:
            spec = selector_spec(config)
        except ConfigError as exc:
            raise (exc.with_source(where) if where else exc) from None
        self.selector_name = spec.name
        self.size = int(data_source.dataset_size)
        features = _read_features(data_source.dataset, feature_keys_of(spec.config), where)
        try:
            self.selector = spec.component.build(spec.config, size=self.size, seed=spec.seed, features=features)
        except ConfigError as exc:
            raise (exc.with_source(where) if where else exc) from None
        except TasksetError as exc:  # a feature column the selector cannot use (a plugin's own bug is not one)
            raise ConfigError([ConfigIssue(f"data_selector.{FEATURE_KEYS}" if features else "data_selector",
                                           str(exc))], where) from None
        unmet = unmet_needs(selector_needs(self.selector, "data_selector"), SUPPORT)
        if unmet:  # e.g. a guard that would never get an evaluation (flexkit_trinity.support)
            raise ConfigError(unmet, where)
        #: Indices handed out so far (Trinity-RFT's own selectors keep this count as their whole state).
        self.current_index = 0
        register_live(self)

    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        """The next ``batch_size`` task indices (Python ints); with ``return_extra_info``, ``(indices, info)``."""
        out = self.selector.get_indices(int(batch_size), return_extra_info)
        self.current_index += int(batch_size)
        if return_extra_info:
            indices, info = out
            return np.asarray(indices).tolist(), info
        return np.asarray(out).tolist()

    def feedback(self, indices: Any, values: Any) -> None:
        """Each task's mean reward, as Trinity-RFT's ``pass_rate_calculator`` reports it (values outside [0, 1]
        are clipped, flexkit's default)."""
        self.selector.feedback(list(indices), list(values))

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe: ``current_index`` (as Trinity-RFT's selectors) and the flexkit selector's whole state."""
        return {
            "current_index": self.current_index,
            STATE_KEY: {"selector": self.selector_name, "size": self.size,
                        "state": state_codec.encode(self.selector.state_dict())},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output. Trinity-RFT's scheduler also passes ``{"current_index": 0}`` on a
        fresh start: that leaves the selector as built."""
        blob = state_dict.get(STATE_KEY)
        self.current_index = int(state_dict.get("current_index", 0) or 0)
        if blob is None:
            if self.current_index:
                _log.warning("taskset %r: the checkpoint holds no flexkit selector state (only current_index=%d, "
                             "e.g. from one of Trinity-RFT's own selectors); %s starts fresh",
                             self.taskset_name, self.current_index, self.selector_name)
            return
        if blob.get("selector") != self.selector_name or blob.get("size") != self.size:
            raise CheckpointError(
                f"taskset {self.taskset_name!r}: the checkpoint holds the state of flexkit selector "
                f"{blob.get('selector')!r} over {blob.get('size')} tasks, but the config builds "
                f"{self.selector_name!r} over {self.size} tasks")
        try:
            decoded = state_codec.decode(blob.get("state"))
        except CheckpointError as exc:
            raise CheckpointError(f"taskset {self.taskset_name!r}: {exc}") from None
        self.selector.load_state_dict(decoded)

    def metrics(self) -> dict[str, float]:
        """The selector's metrics as ``flexkit/selector/<taskset>/<key>`` (see :mod:`flexkit_trinity.metrics`)."""
        return selector_metrics_of(self)


@runtime_checkable
class _Columned(Protocol):
    """A Hugging Face ``datasets.Dataset``, as far as :func:`_read_features` reads its columns."""

    column_names: Any


def _read_features(dataset: Any, keys: tuple[str, ...], where: str | None) -> dict[str, np.ndarray]:
    """The named columns of the taskset's Hugging Face dataset as float64 arrays."""
    columns = list((dataset.column_names if isinstance(dataset, _Columned) else None) or [])
    missing = [k for k in keys if k not in columns]
    if missing:
        raise ConfigError([ConfigIssue(f"data_selector.{FEATURE_KEYS}", f"column {k!r} is not in the taskset "
                                       f"(columns: {', '.join(columns) or 'none'})") for k in missing], where)
    out = {}
    for key in keys:
        try:
            out[key] = np.asarray(list(dataset[key]), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ConfigError([ConfigIssue(f"data_selector.{FEATURE_KEYS}", f"column {key!r} is not numeric: "
                                           f"{exc}")], where) from None
    return out
