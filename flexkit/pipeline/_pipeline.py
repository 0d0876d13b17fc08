"""Loading a pipeline: TOML file -> plugins -> validated config -> the objects a trainer drives."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from flexkit._state_problems import add_problem
from flexkit.config._converter import make_converter, structure
from flexkit.config._loader import local_plugin_specs, read_toml_file, structure_pipeline
from flexkit.config._models import PipelineConfig
from flexkit.errors import (
    CheckpointError,
    ConfigError,
    ConfigIssue,
    KeyPath,
    StateError,
    StateMismatchError,
    TasksetError,
    format_key_path,
)
from flexkit.pipeline._checkpoint import load_state, save_state
from flexkit.pipeline._fingerprint import compare_fingerprints, fingerprint_hints, pipeline_fingerprint
from flexkit.pipeline._grouping import TasksetGrouping, taskset_grouping
from flexkit.pipeline._state import EXTRA_KEY, PIPELINE_KEY, checkpoint_problems, component_of, refusing_component
from flexkit.plugins._contract import FeedbackOperator, ValidationRows, component_bugs
from flexkit.plugins._manager import PluginHost, get_plugins
from flexkit.sample._actuator import Mix
from flexkit.sample._stage import SampleStage
from flexkit.sample._stage_checks import check_refill_stage
from flexkit.scheduler._scheduler import AFTER_FEEDBACK, TasksetEntry, TasksetScheduler
from flexkit.selectors import _members as members
from flexkit.selectors._base import FEATURE_KEYS, TEXT_KEY, columns_of
from flexkit.selectors._grouping import as_label
from flexkit.tasksets import lazy_features
from flexkit.tasksets._base import not_a_label, path_of

#: The keys of :meth:`Pipeline.state_dict`: the scheduler's state, and the sample stage's.
_SCHEDULER, _SAMPLE = "scheduler", "sample"


@attrs.define
class Pipeline:
    """A loaded pipeline: its validated config, the plugins it resolved components with, and where it lives.

    ``base_dir`` is the directory relative paths in the config are resolved against (the file's). The
    scheduler and the feedback operator are built on first use.
    """

    config: PipelineConfig
    plugins: PluginHost
    base_dir: Path
    source: str | None = None
    _scheduler: TasksetScheduler | None = attrs.field(default=None, init=False, repr=False)
    _feedback: FeedbackOperator | None = attrs.field(default=None, init=False, repr=False)
    _sample_stage: SampleStage | None = attrs.field(default=None, init=False, repr=False)
    _groupings: dict[str, TasksetGrouping] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def sample_stage(self) -> SampleStage:
        """The ``[sample]`` stage (scorer + actuator); raises :class:`~flexkit.ConfigError` without one."""
        if self._sample_stage is None:
            raise ConfigError("this pipeline has no [sample] table, so it has no sample stage")
        return self._sample_stage

    @property
    def has_sample_stage(self) -> bool:
        """Whether the pipeline has a ``[sample]`` table."""
        return self._sample_stage is not None

    def apply_sample_stage(self, batch: Any, *, step: int, timing: str | None = None) -> Any:
        """Run the sample stage on ``batch`` (a :class:`~flexkit.sample.RolloutBatch` or a plain dict); for a
        mix stage, hand its proportions to the scheduler (they apply from the next batch not yet selected).
        Returns the action.

        A trainer calls this at each point of its step with ``timing`` (``"post_reward"``,
        ``"post_advantage"``, ...); the stage runs only where its scorer's timing matches, otherwise this
        returns ``None`` without touching the batch. Without ``timing`` it always runs.
        """
        stage = self.sample_stage
        if timing is not None and not stage.should_run(timing):
            return None
        action = stage.run(batch, step=step)  # a plain mapping becomes a RolloutBatch there
        if isinstance(action, Mix):
            self.scheduler.set_mix(action.proportions)
        return action

    @property
    def scheduler(self) -> TasksetScheduler:
        """The :class:`~flexkit.TasksetScheduler` (tasksets opened, selectors built, on first
        use)."""
        if self._scheduler is None:
            self._scheduler = build_scheduler(self.config, self.plugins, self.base_dir)
        return self._scheduler

    @property
    def feedback_operator(self) -> FeedbackOperator:
        """The feedback operator (``[feedback] type``, default ``pass_rate_calculator``)."""
        if self._feedback is None:
            spec = self.config.feedback.operator
            self._feedback = self.plugins.component("feedback", spec.type).build(spec.config)
        return self._feedback

    def feedback(self, experiences: Any) -> dict[str, Any]:
        """Turn experiences into selector feedback with the feedback operator and route it to the
        scheduler; returns the metrics (``{SELECTOR_METRIC: ...}``)."""
        _exps, metrics = self.feedback_operator.process(experiences)
        self.scheduler.feedback(metrics)
        return metrics

    def task_groupings(self) -> dict[str, TasksetGrouping]:
        """Each taskset's grouping of its drawn tasks, by taskset name (those with one; built once):
        :func:`~flexkit.pipeline._grouping.taskset_grouping`."""
        if self._groupings is None:
            found = {entry.name: taskset_grouping(spec.selector.config, entry.taskset, entry.name)
                     for spec, entry in zip(self.config.tasksets, self.scheduler.entries, strict=True)}
            self._groupings = {name: grouping for name, grouping in found.items() if grouping is not None}
        return self._groupings

    def evaluation(self, metrics: Mapping[str, Any]) -> None:
        """Pass the trainer's held-out evaluation to the selectors
        (:meth:`~flexkit.TasksetScheduler.evaluation`); ``flexkit run`` calls it after every
        evaluation, and an integration with its own evaluation loop may call it the same way. Values may be Python
        numbers, numpy scalars, 0-d numpy arrays or 0-d torch tensors: the selectors get Python numbers
        (:func:`~flexkit._metric_names.plain_evaluation`); a value that is not a number is named in a warning."""
        self.scheduler.evaluation(metrics)

    def validation_calibration(self, rows: ValidationRows) -> dict[str, dict[str, float]]:
        """Hand a validation split's scored ``rows`` (:class:`~flexkit.ValidationRows`) to the selectors that
        predict pass rates from a row's columns, and return, by taskset name, how well their predictions agree
        with the scores (:meth:`~flexkit.TasksetScheduler.validation_calibration`; ``frontier`` with ``text_key``:
        ``val_predicted/<group>``, ``val_observed/<group>``, ``val_rank_correlation``). ``flexkit run`` calls it
        after each validation of a trainer that gives its rows (:meth:`~flexkit.Trainer.validation_rows`) and
        records the result as ``flexkit/selector/<taskset>/<name>``; an integration may call it the same way.
        Changes nothing."""
        return self.scheduler.validation_calibration(rows)

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint must match to be loaded: batch size, seed, sample stage (with ``[sample.refill]``),
        ``[feedback]``, trainer, and for each taskset its name, size, content digest
        (:meth:`~flexkit.tasksets.Taskset.content_id`), storage type and parameters, weight, and selector type
        and parameters. A taskset's path and parameters marked ``speed_only`` are recorded but not compared
        (:mod:`flexkit.pipeline._fingerprint`)."""
        return pipeline_fingerprint(self)

    def state_dict(self) -> dict[str, Any]:
        """The whole pipeline state (scheduler with every selector, RNGs included)."""
        state: dict[str, Any] = {_SCHEDULER: self.scheduler.state_dict()}
        if self._sample_stage is not None:
            state[_SAMPLE] = self._sample_stage.state_dict()
        return state

    def state_children(self) -> list[tuple[KeyPath, TasksetScheduler | SampleStage]]:
        """The owners of :meth:`state_dict`'s parts with their keys: the scheduler, and the sample stage if any."""
        children: list[tuple[KeyPath, TasksetScheduler | SampleStage]] = [((_SCHEDULER,), self.scheduler)]
        if self._sample_stage is not None:
            children.append(((_SAMPLE,), self._sample_stage))
        return children

    def check_state(self, state: Any, path: KeyPath, problems: list[str]) -> None:
        """Append the problems of a loaded :meth:`state_dict` (at key path ``path``) to ``problems``, changing
        nothing: each owner of a part checks it (:meth:`state_children`)."""
        if not isinstance(state, Mapping):
            add_problem(problems, path, f"expected a table, got {type(state).__name__}")
            return
        for (key,), owner in self.state_children():
            owner.check_state(state.get(key), (*path, key), problems)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output, all or nothing: when a part fails to load, the whole pipeline is
        left as it was and the error is raised."""
        if self._sample_stage is None:
            self.scheduler.load_state_dict(state[_SCHEDULER])  # all or nothing by itself
            return
        if not isinstance(state.get(_SAMPLE), Mapping):
            raise StateMismatchError("the state has no 'sample' part, but this pipeline has a [sample] stage")
        before = self.state_dict()
        self.scheduler.load_state_dict(state[_SCHEDULER])
        try:
            self._sample_stage.load_state_dict(state[_SAMPLE])
        except BaseException:
            self._sample_stage.load_state_dict(before[_SAMPLE])
            self.scheduler.load_state_dict(before[_SCHEDULER])
            raise

    def save_checkpoint(self, directory: str | os.PathLike[str], *, extra: Mapping[str, Any] | None = None) -> Path:
        """Atomically save the whole pipeline state with its fingerprint to ``directory`` (see
        :mod:`flexkit.pipeline._checkpoint`); ``extra`` (plain data, e.g. a trainer's state) is saved in the same
        commit.
        Returns the path of the committed ``state.json``.

        Every value is checked to load back equal before anything is written; one that cannot raises
        :class:`~flexkit.errors.CheckpointError` naming the component (selector, scorer, actuator, trainer) and
        the key path inside its state."""
        state = {PIPELINE_KEY: self.state_dict(), EXTRA_KEY: dict(extra or {})}
        try:
            return save_state(directory, state, meta={"fingerprint": self.fingerprint()})
        except StateError as exc:
            component, rest = component_of(self, exc.key_path)
            where = f" at {format_key_path(rest)}" if rest else ""
            raise CheckpointError(f"cannot checkpoint the state of {component}{where}: {exc.reason} (nothing was "
                                  "written)") from None

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Load a checkpoint saved by :meth:`save_checkpoint` and return its ``extra``.

        Checks, before anything changes: the checksums, the fingerprint (a checkpoint of a different pipeline,
        of edited taskset files or of other weights is refused, saying what differs; a moved taskset file with
        the same content and a changed ``speed_only`` parameter are accepted, :mod:`flexkit.pipeline._fingerprint`), and
        the state: each owner checks its own part (:meth:`check_state`: step, weights, mix, pending batch, ...)
        and every problem is reported at once; each component checks its own state as it loads. Any failure
        raises :class:`~flexkit.errors.CheckpointError` and leaves the pipeline as it was."""
        state, meta = load_state(directory)
        if not isinstance(meta, Mapping) or not isinstance(state, Mapping) or PIPELINE_KEY not in state:
            raise CheckpointError(f"checkpoint in {directory} is not a flexkit pipeline checkpoint")
        diffs = compare_fingerprints(meta.get("fingerprint"), self.fingerprint(), self, str(directory))
        if diffs:
            raise CheckpointError(f"checkpoint in {directory} is from a different pipeline: "
                                  + "; ".join(diffs + fingerprint_hints(diffs, self)))
        problems = checkpoint_problems(self, state)
        if problems:
            raise CheckpointError(f"checkpoint in {directory} holds an invalid state: " + "; ".join(problems))
        try:
            self.load_state_dict(state[PIPELINE_KEY])
        except Exception as exc:  # a component refusing its state: whatever it raises, named
            component = refusing_component(self, state[PIPELINE_KEY])
            raise CheckpointError(f"checkpoint in {directory} does not fit this pipeline: {component}: "
                                  f"{type(exc).__name__}: {exc}") from None
        return dict(state.get(EXTRA_KEY, {}))

    def describe(self) -> list[str]:
        """Human-readable lines summarising the pipeline (used by ``flexkit validate``)."""
        run = self.config.run
        end = f"{run.total_steps} steps" if run.total_steps else f"{run.total_epochs or 1} epoch(s)"
        lines = [f"run: batch_size={run.batch_size}, seed={run.seed}, {end}"]
        if self._scheduler is not None:
            sched = self._scheduler
            lines[0] += f"; {sched.epoch_length} tasks, {sched.steps_per_epoch} steps/epoch, {sched.total_steps} steps"
        for i, ts in enumerate(self.config.tasksets):
            storage = _params(ts.storage.config)
            where = storage.get("path", "")
            weight = f", weight={ts.weight}" if ts.weight is not None else ""
            size = f" ({self._scheduler.sizes[i]} tasks)" if self._scheduler is not None else ""
            lines.append(f"taskset {i} {ts.name!r}: {ts.storage.type} {where}{size}{weight}; "
                         f"selector {ts.selector.type}{_format_params(ts.selector.config)}")
        sample = self.config.sample
        if sample is not None:
            lines.append(f"sample: {sample.mechanism} with estimator {sample.estimator}; scorer {sample.scorer.type}"
                         f"{_format_params(sample.scorer.config)}; actuator {sample.actuator.type}"
                         f"{_format_params(sample.actuator.config)}")
            if sample.refill is not None:
                lines.append("sample.refill: new rollouts for the groups the filter drops, until its target_groups or "
                             f"max_rounds (surplus={sample.refill.surplus!r})")
        replay = self.config.replay
        if replay is not None:
            lines.append(f"replay: up to {replay.groups} stored informative group(s) per step, none older than "
                         f"{replay.max_age} step(s)")
        if self.config.trainer is not None:
            lines.append(f"trainer: {self.config.trainer.type}{_format_params(self.config.trainer.config)}")
        fb = self.config.feedback
        lines.append(f"feedback: {fb.operator.type}{_format_params(fb.operator.config)}, "
                     f"out_of_range={fb.out_of_range}")
        return lines


def _params(config: Any) -> dict[str, Any]:
    return attrs.asdict(config) if config is not None and attrs.has(type(config)) else {}


def _format_params(config: Any) -> str:
    params = _params(config)
    return " (" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")" if params else ""


def load_pipeline(
    path: str | os.PathLike[str],
    *,
    plugins: Sequence[str] = (),
    overrides: Sequence[str] = (),
) -> Pipeline:
    """Load and validate a pipeline TOML file.

    ``plugins`` adds local plugins (module names or ``.py`` paths relative to the current directory) on top
    of the file's own ``plugins = [...]`` (relative to the file). ``overrides`` are ``--set`` style assignments
    (``"run.seed=3"``, ``"tasksets[0].selector.tau=0.5"``) applied to the file's tables first; error reports then
    name the file and the overrides. Raises :class:`~flexkit.ConfigError` with the full report when anything is
    wrong. ``flexkit run --set`` and the verl adapter's ``+flexkit.set`` both load through here.
    """
    data = read_toml_file(path)
    return pipeline_from_dict(data, base_dir=Path(path).resolve().parent, source=str(path), plugins=plugins,
                              overrides=overrides)


def pipeline_from_dict(
    data: dict[str, Any],
    *,
    base_dir: str | os.PathLike[str] = ".",
    source: str | None = None,
    plugins: Sequence[str] = (),
    overrides: Sequence[str] = (),
) -> Pipeline:
    """Build a pipeline from already-parsed TOML data (``base_dir`` resolves relative paths); ``plugins`` and
    ``overrides`` as in :func:`load_pipeline`."""
    if overrides:
        from flexkit.config._overrides import apply_overrides, run_setting  # the --set grammar, loaded when used

        setting = run_setting(overrides)
        data = apply_overrides(data, setting)
        source = f"{source} [{setting.label}]"
    base = Path(base_dir).resolve()
    specs = local_plugin_specs(data, source)
    if specs or plugins:
        host = PluginHost.load()
        try:
            host.add_local(plugins, base_dir=Path.cwd())
        except ConfigError as exc:
            raise ConfigError([attrs.evolve(i, path=i.path.replace("plugins", "--plugin", 1)) for i in exc.issues],
                              source) from None
        try:
            host.add_local(specs, base_dir=base)
        except ConfigError as exc:
            raise exc.with_source(source) if source else exc from None
    else:
        host = get_plugins()
    config = structure_pipeline(data, host, source)
    pipe = Pipeline(config=config, plugins=host, base_dir=base, source=source)
    if config.sample is not None:
        try:
            pipe._sample_stage = build_sample_stage(config, host)
        except ConfigError as exc:
            raise exc.with_source(source) if source else exc from None
    return pipe


def group_estimators(plugins: PluginHost) -> set[str]:
    """The group advantage estimators the plugins declare (``flexkit_group_estimators``), with those given to
    :func:`~flexkit.sample._scorer.register_group_estimator`; a declaration that is not a list of names raises
    :class:`~flexkit.errors.ConfigError`."""
    from flexkit.sample._scorer import GROUP_ESTIMATORS

    names = set(GROUP_ESTIMATORS)
    for declared in plugins.hook.flexkit_group_estimators():
        if not isinstance(declared, (list, tuple, set, frozenset)) or not all(
                isinstance(n, str) and n.strip() for n in declared):
            raise ConfigError(f"a plugin's flexkit_group_estimators hook returned {declared!r}; it must return a "
                              "list of estimator names")
        names.update(n.strip() for n in declared)
    return names


def build_sample_stage(config: PipelineConfig, plugins: PluginHost) -> SampleStage:
    """Build the ``[sample]`` stage and check its parts fit together (estimator, granularity, mechanism)."""
    sample = config.sample
    if sample is None:
        raise ConfigError("the pipeline has no [sample] table")
    scorer = plugins.component("scorer", sample.scorer.type).build(sample.scorer.config)
    actuator = plugins.component("actuator", sample.actuator.type).build(sample.actuator.config)
    stage = SampleStage(scorer, actuator, mechanism=sample.mechanism, estimator=sample.estimator,
                        weights_key=sample.weights_key, group_estimators=group_estimators(plugins))
    try:
        stage.bind([ts.name for ts in config.tasksets])
    except ConfigError as exc:
        raise exc.with_prefix("sample.actuator") from None
    if sample.refill is not None:
        try:
            check_refill_stage(stage)
        except ConfigError as exc:
            raise exc.with_prefix("sample.refill") from None
    return stage


def selector_seed(seed: int, taskset_id: int) -> np.random.SeedSequence:
    """The seed of taskset ``taskset_id``'s selector: an independent stream derived from the pipeline seed."""
    return np.random.SeedSequence(seed, spawn_key=(0, taskset_id))


def prefetch_enabled(config: PipelineConfig, *, learns: bool = False) -> bool | str:
    """``[run] prefetch``, or its default.

    When a selector learns from feedback (``learns``) or with ``[sample.refill]``, the default is
    ``"after_feedback"``: the next batch is selected in the background right after the step's feedback, so it sees
    that feedback exactly as without prefetch, and its selection still overlaps the rest of the step; with a mix
    stage (whose proportions, set after the feedback, must reach the next batch) it is off. Otherwise it is on
    (``True``: selected right after each read)."""
    if config.run.prefetch is not None:
        return config.run.prefetch
    refill = config.sample is not None and config.sample.refill is not None
    if not (refill or learns):
        return True
    mixes = config.sample is not None and config.sample.mechanism == "mix"
    return False if mixes else AFTER_FEEDBACK


def build_scheduler(config: PipelineConfig, plugins: PluginHost, base_dir: Path) -> TasksetScheduler:
    """Open every taskset, build its selector and wire them into a scheduler.

    Problems are collected across tasksets and raised together as one :class:`~flexkit.ConfigError`
    whose paths point at the offending ``tasksets[i]`` table.
    """
    entries, issues = [], []
    for i, ts in enumerate(config.tasksets):
        storage = plugins.component("storage", ts.storage.type)
        try:
            with component_bugs(storage, f"tasksets[{i}]"):
                taskset = storage.build(ts.storage.config, name=ts.name, base_dir=base_dir)
                size = len(taskset)
            if size == 0:
                raise TasksetError("the taskset is empty", taskset=ts.name, path=path_of(taskset))
            keys = columns_of(ts.selector.config)
            selector_component = plugins.component("selector", ts.selector.type)
            with component_bugs(selector_component, f"tasksets[{i}]"):
                selector = selector_component.build(
                    ts.selector.config, size=size, seed=selector_seed(config.run.seed, i),
                    features=lazy_features(taskset, keys),
                )
        except (TasksetError, ConfigError) as exc:
            issues.append(ConfigIssue(f"tasksets[{i}]", str(exc)))
            continue
        entries.append(TasksetEntry(name=ts.name, taskset=taskset, selector=selector, weight=ts.weight))
    if issues:
        raise ConfigError(issues)
    run = config.run
    try:
        return TasksetScheduler(
            entries, batch_size=run.batch_size, seed=run.seed, total_epochs=run.total_epochs,
            prefetch=prefetch_enabled(config, learns=any(members.flag(e.selector, "learns_from_feedback")
                                                         for e in entries)),
            total_steps=run.total_steps, out_of_range=config.feedback.out_of_range,
            hooks=plugins.hook,
        )
    except ConfigError as exc:  # the scheduler's arguments (not a plugin's own error: that surfaces as itself)
        raise exc.with_prefix("run") from None


def make_selector(
    name: str,
    *,
    size: int,
    seed: int | np.random.SeedSequence = 0,
    features: Mapping[str, Any] | None = None,
    plugins: PluginHost | None = None,
    **params: Any,
) -> Any:
    """Build a registered selector directly, without a pipeline file.

    ``params`` are validated by the selector's config class exactly as a TOML table would be. When
    ``features`` is given and ``feature_keys`` is not, the features' keys (in order, but for a ``text_key``'s) are
    used::

        sel = flexkit.make_selector("difficulty_based", size=N, seed=0,
                                    features={"f0": a0, "f1": a1}, target_reward=0.5, tau=0.5)
    """
    host = plugins or get_plugins()
    component = host.component("selector", name)
    if features is not None and FEATURE_KEYS not in params and any(
        f.alias == FEATURE_KEYS for f in attrs.fields(component.config_cls)
    ):
        params[FEATURE_KEYS] = [key for key in features if key != params.get(TEXT_KEY)]
    config = structure(make_converter(host), params, component.config_cls)
    keep = members.flag(component.factory, "keeps_feature_dtypes")  # reads numeric arrays of any dtype itself
    arrays = {k: _feature_array(name, k, v, keep) for k, v in (features or {}).items()}
    return component.build(config, size=size, seed=seed, features=arrays)


def _feature_array(owner: str, key: str, values: Any, keep_dtype: bool) -> np.ndarray:
    """A feature column for :func:`make_selector`: labels (strings) as given, for a grouping selector; numbers as
    float64 (a copy unless they already are), or, for a selector that ``keeps_feature_dtypes``, a numeric numpy
    array as it is (no copy). Raises :class:`~flexkit.TasksetError` naming the column when ``values`` is not one
    flat column (ragged rows, nested lists) or holds values that are neither labels nor numbers."""
    if keep_dtype and isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values
    try:
        array = np.asarray(values)
        if not isinstance(values, np.ndarray) and array.dtype.kind in "US":  # numpy made text of mixed values
            array = np.asarray(values, dtype=object)
    except ValueError as exc:  # numpy's words for ragged input
        raise TasksetError(f"{owner}: feature column {key!r} is not one column of numbers or labels ({exc})") from None
    if array.ndim == 1 and array.dtype.kind == "O":
        items = array.tolist()
        if items and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            numbers = np.asarray(items)  # numbers held as objects (a pandas object column): as a list of them
            if numbers.dtype.kind in "iuf":
                array = numbers
        elif keep_dtype and items:  # the selector reads numbers: name what the caller gave, not labels made of it
            row, bad = next((i, v) for i, v in enumerate(items)
                            if not isinstance(v, (int, float)) or isinstance(v, bool))
            what = "None (no value)" if bad is None else f"{type(bad).__name__} {bad!r}"[:60]
            given = f"the array of dtype {values.dtype}" if isinstance(values, np.ndarray) else "the values"
            raise TasksetError(f"{owner}: feature column {key!r} must hold numbers, got {what} at row {row} of "
                               f"{given} given")
    if array.ndim == 1 and array.dtype.kind in "Ob":  # mixed Python values, bools: labels, as a taskset reads them
        return np.asarray([_label_of(owner, key, i, v) for i, v in enumerate(array.tolist())], dtype=str)
    if array.dtype.kind in "USO":
        return array
    if array.dtype.kind == "c":
        raise TasksetError(f"{owner}: feature column {key!r} holds complex numbers; give real numbers or labels")
    if array.dtype.kind in "iu" and array.size and (array.max() >= 1 << 53 or array.min() <= -(1 << 53)):
        return array  # integers (ids) float64 would merge: kept exact
    return np.asarray(array, dtype=np.float64)


def _label_of(owner: str, key: str, row: int, value: Any) -> str:
    label = as_label(value)
    if label is None:
        raise TasksetError(f"{owner}: {not_a_label(key, row, value)}")
    return label
