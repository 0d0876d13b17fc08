"""The selector protocol: what picks task indices inside one taskset.

Names follow Trinity-RFT's task-selection module (``get_indices``, ``feedback``, ``state_dict``,
``load_state_dict``). A selector is built by its registered factory as
``factory(config, size=..., seed=..., features=...)``; subclass :class:`Selector` to get argument checks,
feedback validation, RNG state handling and the default config for free.

The conventions a pipeline relies on (also listed under ``flexkit_register_selectors`` in
:mod:`flexkit.plugins._hookspecs`):

- a config field named :data:`FEATURE_KEYS` (``feature_keys``) lists the taskset's feature columns the selector
  reads, and one named :data:`TEXT_KEY` (``text_key``) a text column; the pipeline loads exactly those
  (:func:`columns_of`) and passes them as ``features``;
- :attr:`Selector.allows_repeats`: whether one batch may hold an index twice (else the scheduler refuses a
  batch share larger than the taskset, and refuses a batch that repeats an index);
- :attr:`Selector.repeats_across_epochs`: whether a batch crossing the end of the selector's own epoch may hold
  an index twice, once per epoch (``shuffle``); the scheduler then refuses only an index three times;
- :attr:`Selector.learns_from_feedback`: whether the selector learns from feedback, which reaches it through
  :meth:`Selector._update`, the method learning selectors override;
- :attr:`Selector.atomic_feedback`: whether the selector's feedback changes nothing unless it succeeds whole on
  a validated payload, so the scheduler need not copy its state before feedback to restore it on failure;
- :meth:`Selector.observe_evaluation` (optional on selectors that do not subclass :class:`Selector`): the
  trainer's held-out evaluation (metric name → value) after each evaluation, for selectors that act on it.
"""

from __future__ import annotations

import abc
import copy
import functools
import itertools
import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from flexkit.errors import ComponentError, ConfigError, FeedbackError, FlexkitError, StateMismatchError, TasksetError
from flexkit.plugins._contract import Configurable, ValidationRows, display_name
from flexkit.plugins._contract import OutOfRange as OutOfRange  # "clip" or "error"; its home is the selector protocol's

Seed = int | np.random.SeedSequence

#: The config field naming the feature columns a selector reads (in order).
FEATURE_KEYS = "feature_keys"
#: The config field naming a text column a selector reads (the pipeline loads it with the feature columns).
TEXT_KEY = "text_key"

LoadStateDict = Callable[[Any, Mapping[str, Any]], None]

#: The ``load_state_dict`` wrappers :func:`checked_load` made (so that it wraps each method once).
_CHECKED_LOADS: weakref.WeakSet[LoadStateDict] = weakref.WeakSet()


def checked_load(load: LoadStateDict) -> LoadStateDict:
    """Make a selector's ``load_state_dict`` all or nothing, with one error type for a state that does not fit.

    The outermost call (a subclass's method calling ``super().load_state_dict`` runs inside it) takes a copy of
    :meth:`Selector.state_dict` first; when loading fails part-way it restores that copy, so the selector is left
    as it was, and what reading a damaged or foreign state raises (a missing key, a value of the wrong type or
    shape, a number out of range for the RNG) becomes a :class:`~flexkit.errors.StateMismatchError` naming the
    selector; a ``StateMismatchError`` of the selector's own is prefixed with its name unless it names the class
    already (flexkit's other errors pass through as they are). :class:`Selector` applies it to every
    ``load_state_dict`` a subclass defines.
    """
    if load in _CHECKED_LOADS:
        return load

    @functools.wraps(load)
    def load_state_dict(self: Any, state: Mapping[str, Any]) -> None:
        if self.__dict__.get("_loading_state"):
            load(self, state)
            return
        before = copy.deepcopy(self.state_dict())
        self._loading_state = True
        try:
            load(self, state)
        except (FlexkitError, KeyError, TypeError, ValueError, IndexError, AttributeError, ArithmeticError) as exc:
            load(self, before)
            named = _named_refusal(self, exc)
            if named is None:
                raise
            raise named from exc
        finally:
            self._loading_state = False

    _CHECKED_LOADS.add(load_state_dict)
    return load_state_dict


def _named_refusal(selector: Any, exc: Exception) -> StateMismatchError | None:
    """The :class:`~flexkit.errors.StateMismatchError` naming ``selector`` that :func:`checked_load` raises for
    ``exc``; ``None`` where ``exc`` passes through as it is (flexkit's other errors, or a refusal that names the
    selector's class already)."""
    refused = f"the saved state does not fit this {display_name(selector)} selector"
    if isinstance(exc, StateMismatchError):
        return None if type(selector).__name__ in str(exc) else StateMismatchError(f"{refused}: {exc}")
    if isinstance(exc, FlexkitError):
        return None
    return StateMismatchError(f"{refused} ({type(exc).__name__}: {exc})")


def feature_keys_of(config: Any) -> tuple[str, ...]:
    """The feature columns a selector config names in its :data:`FEATURE_KEYS` field (none without one)."""
    return tuple(getattr(config, FEATURE_KEYS, ()) or ())


def _inherited(cls: type, name: str) -> Any:
    """The class attribute ``name`` of ``cls`` as its MRO's class dictionaries hold it (``None``: none has it)."""
    return next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), None)


def columns_of(config: Any) -> tuple[str, ...]:
    """Every column a pipeline loads for a selector: its :data:`FEATURE_KEYS`, then the text column its
    :data:`TEXT_KEY` field names, when set (``frontier``'s pass-rate model over prompts)."""
    text = getattr(config, TEXT_KEY, "") or ""
    keys = feature_keys_of(config)
    return (*keys, text) if text and text not in keys else keys


class Selector(Configurable, abc.ABC):
    """Base class of selectors.

    Subclasses set :attr:`Config` (their attrs config class), implement :meth:`_select`, set up their own
    state in :meth:`_init_state` (not ``__init__``), and, if they learn from feedback, set
    :attr:`learns_from_feedback` and override :meth:`_update`; they extend
    :meth:`state_dict` / :meth:`load_state_dict` with their own state (calling ``super()``). State is plain
    data: JSON-serialisable values and numpy arrays, never pickled objects.

    Args:
        config: the selector's attrs config instance (validated); ``None``: ``Config()``, its defaults.
        size: number of tasks in the taskset (indices are ``0 .. size-1``).
        seed: an int or a ``numpy.random.SeedSequence``; the selector's random stream derives from it only.
        features: feature columns by name (numpy arrays of length ``size``), in the order the config names
            them; a lazy mapping is fine, only the columns a selector reads are loaded.
    """

    #: Whether :meth:`get_indices` can return the same index twice in one batch.
    allows_repeats: ClassVar[bool] = False
    #: Whether a batch crossing the end of the selector's own epoch may hold an index twice (once per epoch).
    repeats_across_epochs: ClassVar[bool] = False
    #: Whether feedback changes what the selector picks (it overrides :meth:`_update`).
    learns_from_feedback: ClassVar[bool] = False
    #: Whether :func:`flexkit.make_selector` may pass numeric feature arrays of any dtype as they are (no float64
    #: copy): the selector converts what it reads itself.
    keeps_feature_dtypes: ClassVar[bool] = False
    #: Whether :meth:`feedback` on a payload the scheduler validated either succeeds whole or changes nothing:
    #: the scheduler then takes no copy of the state before feedback (all-or-nothing feedback over several
    #: tasksets restores copied states when a selector fails). A class declares it for its own feedback code: a
    #: subclass that overrides :meth:`_update` or :meth:`feedback` without declaring it again is not atomic.
    #: The base class's feedback (validate, then an ``_update`` that ignores feedback) is.
    atomic_feedback: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "load_state_dict" in cls.__dict__:
            cls.load_state_dict = checked_load(cls.__dict__["load_state_dict"])  # type: ignore[method-assign]
        if "atomic_feedback" not in cls.__dict__:
            declarer = next(c for c in cls.__mro__[1:] if "atomic_feedback" in c.__dict__)
            if (_inherited(cls, "_update") is not _inherited(declarer, "_update")
                    or _inherited(cls, "feedback") is not _inherited(declarer, "feedback")):
                cls.atomic_feedback = False

    def __init__(
        self,
        config: Any = None,
        *,
        size: int,
        seed: Seed = 0,
        features: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ConfigError(f"a selector needs a taskset with at least one task, got size={size!r}")
        super().__init__(config)
        self.size = int(size)
        self.rng = np.random.default_rng(seed)
        self.features: Mapping[str, np.ndarray] = features if features is not None else {}
        self._init_state()

    # -- the protocol -------------------------------------------------------------------------------------

    def get_indices(
        self, batch_size: int, return_extra_info: bool = False
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """The indices of the next ``batch_size`` tasks (an int64 array).

        With ``return_extra_info=True`` returns ``(indices, info)`` where ``info`` explains the choice
        (for example scores and predicted success rates).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        if not self.allows_repeats and batch_size > self.size:
            raise ConfigError(
                f"{type(self).__name__} draws without repeats within a batch, so batch_size ({batch_size}) "
                f"cannot exceed the taskset size ({self.size})"
            )
        indices, info = self._select(int(batch_size), return_extra_info)
        indices = np.asarray(indices)
        if indices.dtype != np.int64:
            if indices.size and (indices.dtype == bool or not np.issubdtype(indices.dtype, np.integer)):
                raise ComponentError(f"{display_name(self)}._select returned {indices.dtype} indices (such as "
                                     f"{indices.reshape(-1)[0]!r}); indices must be integers (a float index would "
                                     "be truncated)")
            indices = indices.astype(np.int64)
        return (indices, info) if return_extra_info else indices

    def feedback(
        self,
        indices: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        *,
        out_of_range: OutOfRange = "clip",
    ) -> None:
        """Update the selector with observed values (e.g. mean reward per task) for ``indices``.

        The payload is checked first (see :func:`validate_feedback`); when it is rejected nothing changes.
        """
        idx, vals = validate_feedback(indices, values, self.size, out_of_range=out_of_range)
        self._feedback_validated(idx, vals)

    def _feedback_validated(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Take feedback already validated by :func:`validate_feedback` (the scheduler's one check): int64
        indices in range without duplicates, float64 values in [0, 1]. :meth:`feedback` after its check, and the
        scheduler for a selector that keeps the base class's :meth:`feedback`, call it; not for other callers."""
        if indices.size:
            self._update(indices, values)

    def predicted_pass_rates(self) -> np.ndarray | None:
        """Every task's pass-rate estimate (``size`` numbers in [0, 1]), for metrics and plots; the caller copies
        it. The default: ``None``, the selector keeps none."""
        return None

    def summary(self) -> Mapping[str, float]:
        """A few numbers describing the selector's state (name → number), added to the host's metrics as
        ``flexkit/selector/<taskset>/<name>``. The default: none."""
        return {}

    def evaluation_keys(self) -> tuple[str, ...]:
        """The keys of this selector's config whose setting makes it read held-out evaluations
        (:meth:`observe_evaluation`), e.g. ``("guard_metric",)``. A host that hands the pipeline no evaluations
        refuses such a selector (:func:`flexkit.pipeline._support.check_support`) instead of letting it go quiet.
        The default: none."""
        return ()

    def group_accuracy_keys(self) -> tuple[str, ...]:
        """The keys among :meth:`evaluation_keys` whose setting reads each group's validation accuracy under the
        host-neutral name ``val_accuracy/<group>`` (:data:`flexkit.host.GUARD_TEMPLATE`), which a host computes
        from its validation rewards pooled by the selector's grouping column; a host that hands evaluations but
        not those refuses such a selector. The default: none."""
        return ()

    def observe_evaluation(self, metrics: Mapping[str, float]) -> None:
        """Take the trainer's latest held-out evaluation (metric name → value, as ``evaluate`` returned it).

        The scheduler passes every evaluation of a run
        (:meth:`~flexkit.TasksetScheduler.evaluation`);
        whatever a selector keeps from it belongs in its :meth:`state_dict`. The default ignores it.
        """

    def validation_calibration(self, rows: ValidationRows) -> dict[str, float]:
        """Hold this selector's predicted pass rates of a validation split's ``rows`` (tasks it was never fed)
        against their scores, and return how well they agree (name → number; recorded as
        ``flexkit/selector/<taskset>/<name>`` on the evaluation's step). Reads the selector's state, changes
        nothing. The default: ``{}``, the selector predicts nothing for rows outside its pool."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this selector is (RNG state included)."""
        return {"rng": self.rng.bit_generator.state}

    @checked_load
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict` of a selector built with the same config and size.

        All or nothing: a state that does not fit raises :class:`~flexkit.errors.StateMismatchError` (a
        ``ValueError``) and leaves the selector as it was (:func:`checked_load`, which wraps every subclass's
        ``load_state_dict`` too)."""
        self.rng.bit_generator.state = _plain(state["rng"])

    # -- for subclasses ---------------------------------------------------------------------------------

    def _init_state(self) -> None:
        """Set up the selector's own state; :meth:`__init__` calls it last, so subclasses need no ``__init__``.

        ``self.config`` (defaults filled in), ``self.size``, ``self.rng`` and ``self.features`` are set by then.
        Raise :class:`~flexkit.errors.TasksetError` (a ``ValueError``) for features the selector cannot use. The
        default sets up nothing.
        """

    @abc.abstractmethod
    def _select(self, batch_size: int, return_extra_info: bool) -> tuple[np.ndarray, dict[str, Any]]:
        """Pick ``batch_size`` indices; return them with an info dict (may be empty when not asked for)."""

    def _update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """The learning hook: learning selectors override it (and set :attr:`learns_from_feedback`).

        :meth:`feedback` calls it with validated, non-empty feedback: int64 indices without duplicates and
        float64 values in [0, 1]. The default ignores feedback.
        """


def validate_feedback(
    indices: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    size: int,
    *,
    out_of_range: OutOfRange = "clip",
    clipped: list[float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Check a feedback payload and return it as ``(int64 indices, float64 values)``.

    Rejected with :class:`~flexkit.errors.FeedbackError`: a length mismatch, non-integer or out-of-range or
    duplicate indices, non-numeric, NaN or infinite values. Values outside [0, 1] are clipped into range
    (``out_of_range="clip"``, the default; the first such value is appended to ``clipped`` when given) or rejected
    (``"error"``).
    """
    _check_list_types("indices", indices, _INDEX_TYPES)
    _check_list_types("values", values, _VALUE_TYPES)
    try:
        idx = np.asarray(indices)
        vals = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise FeedbackError(f"feedback indices/values are not arrays: {exc}") from None
    if idx.ndim != 1 or vals.ndim != 1:
        raise FeedbackError(f"feedback indices and values must be flat lists, got shapes {idx.shape} and {vals.shape}")
    if len(idx) != len(vals):
        raise FeedbackError(f"feedback has {len(idx)} indices but {len(vals)} values")
    if idx.size == 0:
        return idx.astype(np.int64), vals.astype(np.float64)
    if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
        raise FeedbackError(f"feedback indices must be integers, got {idx.dtype} values such as {idx[0]!r}")
    if vals.dtype == bool or not (np.issubdtype(vals.dtype, np.floating) or np.issubdtype(vals.dtype, np.integer)):
        raise FeedbackError(f"feedback values must be numbers, got {vals.dtype} values such as {vals[0]!r}")
    bad = (idx < 0) | (idx >= size)  # before the cast: uint64 indices past 2^63 would wrap to negative ones
    if bad.any():
        raise FeedbackError(f"feedback index {int(idx[bad][0])} is out of range for a taskset of {size} tasks")
    idx = idx.astype(np.int64)
    vals = vals.astype(np.float64)
    if not np.isfinite(vals).all():
        raise FeedbackError(f"feedback values must be finite, got {vals[~np.isfinite(vals)][0]!r}")
    ordered = np.sort(idx)  # not np.unique: numpy 2.4's takes ~12 s on 10^7 indices, sorting ~0.3 s
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:
        raise FeedbackError(f"feedback repeats index {int(repeated[0])}; aggregate per task first")
    outside = (vals < 0.0) | (vals > 1.0)
    if outside.any():
        if out_of_range == "error":
            raise FeedbackError(
                f"feedback value {vals[outside][0]!r} is outside [0, 1] (set out_of_range = \"clip\" to clip)"
            )
        if clipped is not None:
            clipped.append(float(vals[outside][0]))
        vals = np.clip(vals, 0.0, 1.0)
    return idx, vals


#: Element types of a feedback list that numpy turns into numbers without surprises.
_INDEX_TYPES: tuple[type, ...] = (int, np.integer)
_VALUE_TYPES: tuple[type, ...] = (int, float, np.integer, np.floating)
#: Element types that can never be feedback numbers: refused before numpy converts the whole list.
_NEVER_NUMBERS: tuple[type, ...] = (bool, np.bool_, str, bytes, np.str_, np.bytes_, type(None))


def _check_list_types(name: str, given: Any, numbers: tuple[type, ...]) -> None:
    """Refuse a feedback list holding booleans, strings, bytes or None, in time and memory bounded by the list.

    One pass collects the element *types* (no object is built per element); only a list with a type that is
    neither a number nor surely wrong goes on to numpy's own inference. Without this, numpy turned 10^7 numbers
    ending in one string into 10^7 strings before the payload could be refused, and a bool inside a list of
    numbers silently became 0 or 1.
    """
    if not isinstance(given, (list, tuple)):
        return
    types = set(map(type, given))
    if all(issubclass(t, numbers) and not issubclass(t, (bool, np.bool_)) for t in types):
        return
    wrong = tuple(t for t in types if issubclass(t, _NEVER_NUMBERS))
    if not wrong:
        return  # e.g. 0-d arrays or tensors: numpy decides
    position = operator.indexOf(map(isinstance, given, itertools.repeat(wrong)), True)  # C loop, no object per entry
    example = given[position]
    kind = "integers" if name == "indices" else "numbers"
    if isinstance(example, (bool, np.bool_)):
        raise FeedbackError(f"feedback {name} must be {kind}, not booleans ({example!r} at position {position})")
    shown = repr(example) if len(repr(example)) <= 40 else repr(example)[:37] + "..."
    raise FeedbackError(f"feedback {name} must be {kind}, got {type(example).__name__} {shown} at position "
                        f"{position} of {len(given)}")


def read_feature_columns(
    features: Mapping[str, np.ndarray], keys: Sequence[str], size: int, *, owner: str
) -> list[np.ndarray]:
    """Fetch and check the feature columns ``keys`` (1-D, numeric, length ``size``, no NaN).

    Raises :class:`~flexkit.errors.TasksetError` naming the selector (``owner``) and the offending key. Only the
    named columns are read, so a lazy mapping loads nothing else. Columns are returned read-only and in their own
    dtype, checked once: a column nobody can write (:func:`_unwritable`: a taskset's columns, or an array the
    caller made read-only that owns its memory) as a view without a copy, any other as a copy, so that writing
    into the caller's array afterwards changes nothing the selector reads (nor slips past these checks).
    """
    columns = []
    for key in keys:
        try:
            raw = features[key]
        except KeyError:
            try:
                known = ", ".join(repr(k) for k in features)
            except Exception:  # a lazy mapping may not list its keys
                known = "?"
            raise TasksetError(f"{owner}: feature column {key!r} is missing (available: {known or 'none'})") from None
        col = np.asarray(raw)
        if not _unwritable(col):
            col = col.copy()  # the caller may write into its array later: the selector keeps its own values
        if col.ndim != 1:
            raise TasksetError(f"{owner}: feature column {key!r} must be 1-D, got shape {col.shape}")
        if col.shape[0] != size:
            raise TasksetError(f"{owner}: feature column {key!r} has {col.shape[0]} values for {size} tasks")
        if not (np.issubdtype(col.dtype, np.number) or col.dtype == bool) or np.issubdtype(
            col.dtype, np.complexfloating
        ):
            raise TasksetError(f"{owner}: feature column {key!r} must be numeric, got dtype {col.dtype}")
        if np.issubdtype(col.dtype, np.floating) and np.isnan(col.min() if col.size else 0.0):
            raise TasksetError(f"{owner}: feature column {key!r} contains NaN")
        col = col.view()
        col.flags.writeable = False
        columns.append(col)
    return columns


def _unwritable(array: np.ndarray) -> bool:
    """Whether no one can write ``array``'s values through numpy: it is read-only, and so is every array it is a
    view of, down to one that owns its memory (or immutable ``bytes``). Its owner could make it writable again;
    passing a read-only array is the promise not to."""
    node: Any = array
    while isinstance(node, np.ndarray):
        if node.flags.writeable:
            return False
        if node.base is None:
            return True
        node = node.base
    return isinstance(node, bytes)


def _plain(state: Any) -> Any:
    """Turn numpy scalars back into Python ints (bit-generator states must hold Python ints)."""
    if isinstance(state, Mapping):
        return {k: _plain(v) for k, v in state.items()}
    if isinstance(state, np.integer):
        return int(state)
    return state
