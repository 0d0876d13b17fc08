"""A pipeline's checkpoint fingerprint, and what of it is identity: content, not place or speed.

:func:`pipeline_fingerprint` records what a checkpoint must match to be loaded: batch size, seed, the sample
stage (with ``[sample.refill]``), the ``[feedback]`` table, the trainer, ``[replay]`` when set, and for each
taskset its name, size, content digest, storage type and parameters, weight, and selector type and parameters.

:func:`compare_fingerprints` compares the identity in two fingerprints, leaving out:

* **place**: a taskset's ``path`` when its content digest is known (the digest then says whether the rows are the
  same, wherever the file now lives); a moved file is reported, not refused;
* **speed**: parameters a component's config marks ``speed_only`` (:func:`flexkit.config.field`), such as the
  ``toyrl`` trainer's ``num_threads``: they change how fast a run goes, not what it computes.
* **a digest that cannot be checked**: a taskset whose storage gives no content digest now (a generated one,
  such as ``simulated``, which its storage parameters identify) is not compared with a digest an older flexkit
  recorded for it; its digest of generated floats differed between CPUs that round differently.

The ``[run]`` keys besides ``batch_size`` and ``seed`` (``prefetch``, ``total_steps``, ``eval_every``,
``checkpoint_every``, ``max_rollouts``) were never part of the fingerprint. Checkpoints written before
``[sample.refill]`` and ``[feedback]`` were recorded lack those parts; they are then not compared (and a
warning says so).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs
import structlog

from flexkit.config._fields import FACTORY_CLASS, field_meta
from flexkit.pipeline._view import PipelineView
from flexkit.tasksets._base import content_id_of

log = structlog.get_logger("flexkit.checkpoint")

__all__ = ["LATER_PARTS", "compare_fingerprints", "differences", "fingerprint_hints", "pipeline_fingerprint",
           "speed_only_keys"]

#: Parts of the fingerprint that older checkpoints lack (``(parent key or None, key)``): not compared then.
LATER_PARTS: tuple[tuple[str | None, str], ...] = ((None, "feedback"), ("sample", "refill"))


def _params(config: Any) -> dict[str, Any]:
    return attrs.asdict(config) if config is not None and attrs.has(type(config)) else {}


def _plain(config: Any) -> dict[str, Any]:
    """A config as JSON-like data (tuples become lists), for fingerprints."""
    return cast(dict[str, Any], json.loads(json.dumps(_params(config))))


def speed_only_keys(config: Any) -> frozenset[str]:
    """The names of ``config``'s fields marked ``speed_only`` (none for a config that is not an attrs class)."""
    if config is None or not attrs.has(type(config)):
        return frozenset()
    return frozenset(f.name for f in attrs.fields(type(config)) if field_meta(f).get("speed_only"))


def pipeline_fingerprint(pipe: PipelineView) -> dict[str, Any]:
    """What a checkpoint of ``pipe`` records about it (see the module docstring)."""
    cfg = pipe.config
    trainer = None
    if cfg.trainer is not None:
        trainer = {"type": cfg.trainer.type, "params": _plain(cfg.trainer.config)}
    sample = None
    if cfg.sample is not None:
        sample = {"mechanism": cfg.sample.mechanism, "estimator": cfg.sample.estimator,
                  "scorer": cfg.sample.scorer.type, "scorer_params": _plain(cfg.sample.scorer.config),
                  "actuator": cfg.sample.actuator.type, "actuator_params": _plain(cfg.sample.actuator.config),
                  "refill": None if cfg.sample.refill is None else _plain(cfg.sample.refill)}
    feedback = {"type": cfg.feedback.operator.type, "params": _plain(cfg.feedback.operator.config),
                "out_of_range": cfg.feedback.out_of_range}
    out: dict[str, Any] = {
        "batch_size": cfg.run.batch_size,
        "seed": cfg.run.seed,
        "sample": sample,
        "feedback": feedback,
        "trainer": trainer,
        "tasksets": [
            {"name": ts.name, "size": entry.size, "content": content_id_of(entry.taskset),
             "storage": {"type": ts.storage.type, "params": _plain(ts.storage.config)},
             "weight": ts.weight, "selector": ts.selector.type, "params": _plain(ts.selector.config)}
            for ts, entry in zip(cfg.tasksets, pipe.scheduler.entries, strict=True)
        ],
    }
    if cfg.replay is not None:  # recorded only when set: a checkpoint without it had none
        out["replay"] = _plain(cfg.replay)
    return out


def _drop(table: Any, keys: frozenset[str]) -> None:
    if isinstance(table, dict):
        for key in keys:
            table.pop(key, None)


def _identity(fingerprint: Any, pipe: PipelineView) -> Any:
    """``fingerprint`` without place (paths of tasksets with a content digest) and speed-only parameters."""
    if not isinstance(fingerprint, dict):
        return fingerprint
    out = copy.deepcopy(fingerprint)
    cfg = pipe.config
    trainer = out.get("trainer")
    if isinstance(trainer, dict) and cfg.trainer is not None:
        _drop(trainer.get("params"), speed_only_keys(cfg.trainer.config))
    sample = out.get("sample")
    if isinstance(sample, dict) and cfg.sample is not None:
        _drop(sample.get("scorer_params"), speed_only_keys(cfg.sample.scorer.config))
        _drop(sample.get("actuator_params"), speed_only_keys(cfg.sample.actuator.config))
    feedback = out.get("feedback")
    if isinstance(feedback, dict):
        _drop(feedback.get("params"), speed_only_keys(cfg.feedback.operator.config))
    tasksets = out.get("tasksets")
    if isinstance(tasksets, list):
        for ts, spec in zip(tasksets, cfg.tasksets, strict=False):
            if not isinstance(ts, dict):
                continue
            _drop(ts.get("params"), speed_only_keys(spec.selector.config))
            storage = ts.get("storage")
            if isinstance(storage, dict):
                _drop(storage.get("params"), speed_only_keys(spec.storage.config))
                if ts.get("content") is not None:
                    _drop(storage.get("params"), frozenset({"path"}))
    return out


def _unchecked_digests(theirs: Any, mine: dict[str, Any]) -> Any:
    """``theirs`` without the content digests of tasksets that give none now (they cannot be checked)."""
    if not isinstance(theirs, dict) or not isinstance(theirs.get("tasksets"), list):
        return theirs
    out = copy.deepcopy(theirs)
    for old, new in zip(out["tasksets"], mine.get("tasksets") or [], strict=False):
        if isinstance(old, dict) and isinstance(new, dict) and new.get("content") is None:
            old["content"] = None
    return out


def _default_params(config: Any) -> dict[str, Any]:
    """``config``'s fields that have a default, with it as JSON-like data (as :func:`_plain` writes values); a
    default computed from the other fields is the one ``config``'s own fields give."""
    if config is None or not attrs.has(type(config)):
        return {}
    out = {}
    for f in attrs.fields(type(config)):
        default = f.default
        if isinstance(default, FACTORY_CLASS):
            default = default.factory(config) if default.takes_self else default.factory()
        if default is attrs.NOTHING:
            continue
        if attrs.has(type(default)):
            default = attrs.asdict(default)
        out[f.name] = json.loads(json.dumps(default))
    return out


def _earlier_defaults(config: Any) -> dict[str, Any]:
    """``config``'s fields whose default changed since the release before, with that release's default
    (:func:`flexkit.config.field`'s ``earlier_default``)."""
    if config is None or not attrs.has(type(config)):
        return {}
    out = {}
    for f in attrs.fields(type(config)):
        earlier = field_meta(f).get("earlier_default", attrs.NOTHING)
        if earlier is not attrs.NOTHING:
            out[f.name] = earlier
    return out


def _param_tables(fingerprint: Any, pipe: PipelineView) -> list[tuple[str, Any, Any, Any]]:
    """``(path, params table, config, component type)`` for every component parameter table of ``fingerprint``."""
    if not isinstance(fingerprint, dict):
        return []
    cfg, out = pipe.config, []
    trainer, sample, feedback = fingerprint.get("trainer"), fingerprint.get("sample"), fingerprint.get("feedback")
    if isinstance(trainer, dict) and cfg.trainer is not None:
        out.append(("trainer", trainer.get("params"), cfg.trainer.config, trainer.get("type")))
    if isinstance(sample, dict) and cfg.sample is not None:
        out.append(("sample.scorer", sample.get("scorer_params"), cfg.sample.scorer.config, sample.get("scorer")))
        out.append(("sample.actuator", sample.get("actuator_params"), cfg.sample.actuator.config,
                    sample.get("actuator")))
    if isinstance(feedback, dict):
        out.append(("feedback", feedback.get("params"), cfg.feedback.operator.config, feedback.get("type")))
    for i, (ts, spec) in enumerate(zip(fingerprint.get("tasksets") or [], cfg.tasksets, strict=False)):
        if isinstance(ts, dict):
            out.append((f"tasksets[{i}].selector", ts.get("params"), spec.selector.config, ts.get("selector")))
            storage = ts.get("storage")
            if isinstance(storage, dict):
                out.append((f"tasksets[{i}].storage", storage.get("params"), spec.storage.config,
                            storage.get("type")))
    return out


def _later_parameters(theirs: Any, mine: dict[str, Any], pipe: PipelineView, where: str) -> dict[str, Any]:
    """``mine`` without the parameters an older checkpoint does not record and that are at their default now: a
    component that gained a parameter computes what it computed before when the parameter keeps its default."""
    mine = copy.deepcopy(mine)
    recorded = {path: (old, kind) for path, old, _config, kind in _param_tables(theirs, pipe)}
    for path, new, config, new_type in _param_tables(mine, pipe):
        old, old_type = recorded.get(path, (None, None))
        if not isinstance(old, dict) or not isinstance(new, dict) or old_type != new_type:
            continue  # a part or component the checkpoint does not have: the comparison reports it
        defaults, earlier = _default_params(config), _earlier_defaults(config)
        later = [k for k in new if k not in old and k in defaults
                 and (new[k] == defaults[k] or (k in earlier and new[k] == earlier[k]))]
        for key in later:
            new.pop(key)
        if later:
            log.warning("the checkpoint, written by an older flexkit, does not record these parameters; they are "
                        "at their defaults", component=path, parameters=later, checkpoint=where)
    return mine


def _path_of(ts: Any) -> Any:
    storage = ts.get("storage") if isinstance(ts, Mapping) else None
    params = storage.get("params") if isinstance(storage, Mapping) else None
    return params.get("path") if isinstance(params, Mapping) else None


def compare_fingerprints(theirs: Any, mine: dict[str, Any], pipe: PipelineView, where: str) -> list[str]:
    """The differences of identity between a checkpoint's fingerprint (``theirs``) and the pipeline's
    (``mine``), as readable lines (none: the checkpoint fits). Logs a taskset read from another path with the
    same content, and the parts an older checkpoint does not record (``where`` names the checkpoint)."""
    mine = dict(mine)
    if isinstance(theirs, dict):
        for parent, key in LATER_PARTS:
            holder_theirs = theirs if parent is None else theirs.get(parent)
            holder_mine = mine if parent is None else mine.get(parent)
            if (isinstance(holder_theirs, dict) and key not in holder_theirs and isinstance(holder_mine, dict)
                    and key in holder_mine):
                if parent is not None:
                    mine[parent] = {k: v for k, v in holder_mine.items() if k != key}
                else:
                    mine.pop(key)
                log.warning("the checkpoint, written by an older flexkit, does not record this part of the "
                            "pipeline: it is not checked", part=f"{parent}.{key}" if parent else key,
                            checkpoint=where)
    mine = _later_parameters(theirs, mine, pipe, where)
    diffs = differences(_identity(_unchecked_digests(theirs, mine), pipe), _identity(mine, pipe))
    if not diffs and isinstance(theirs, dict):
        for i, (old, new) in enumerate(zip(theirs.get("tasksets") or [], mine.get("tasksets") or [], strict=False)):
            if _path_of(old) != _path_of(new):
                log.warning("taskset file moved since the checkpoint; same content, resuming", taskset=new["name"],
                            index=i, checkpoint_path=_path_of(old), path=_path_of(new))
    return diffs


#: How :func:`differences` words one difference by default: a checkpoint's value against the pipeline's.
CHECKPOINT_FORM = "{path}: {old!r} in the checkpoint, {new!r} now"


def differences(old: Any, new: Any, path: str = "", *, form: str = CHECKPOINT_FORM) -> list[str]:
    """Readable differences between two fingerprints (``tasksets[1].size: 100 in the checkpoint, 120 now``), or
    two other nested tables with another ``form`` (its fields: ``path``, ``old``, ``new``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += differences(old.get(key), new.get(key), f"{path}.{key}" if path else key, form=form)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True))
                for d in differences(a, b, f"{path}[{i}]", form=form)]
    if old != new:
        return [form.format(path=path or "pipeline", old=old, new=new)]
    return []


def fingerprint_hints(diffs: Sequence[str], pipe: PipelineView | None = None) -> list[str]:
    """What to do about fingerprint differences that users make on purpose (weights, edited taskset files), and,
    given ``pipe``, about selector defaults that changed since the checkpoint was written."""
    hints = []
    if any(".weight:" in d for d in diffs):
        hints.append("taskset weights cannot change within a run (each epoch's plan is drawn from them): put the "
                     "checkpoint's weights back to resume, or start a new run with the new weights")
    if any(".content:" in d for d in diffs):
        hints.append("a taskset's rows changed since the checkpoint, so its selector's state (kept per task index) "
                     "would describe other tasks: restore the taskset the run started with, or start a new run")
    if any(d.startswith("sample.refill") for d in diffs):
        hints.append("[sample.refill] (dynamic sampling) cannot be added, removed or changed within a run (the "
                     "checkpointed steps were drawn and trained with the checkpoint's setting): put it back as it "
                     "was to resume, or start a new run")
    if any(d.startswith("replay") for d in diffs):
        hints.append("[replay] cannot be added, removed or changed within a run (the checkpointed steps trained "
                     "on what it replayed): put it back as it was to resume, or start a new run")
    if any(d.startswith("feedback") for d in diffs):
        hints.append("the [feedback] table cannot change within a run (the selectors' state was learnt from its "
                     "values): put it back as it was to resume, or start a new run")
    for i, spec in enumerate(pipe.config.tasksets if pipe is not None else ()):
        earlier = _earlier_defaults(spec.selector.config)
        if any(d.startswith(f"tasksets[{i}].params.{key}:") for key in earlier for d in diffs):
            old = ", ".join(f"{key} = {value!r}" for key, value in earlier.items())
            hints.append(f"tasksets[{i}].selector: the defaults of {spec.selector.type!r} changed since the release "
                         "before this one; a run started with the earlier ones resumes with them written into its "
                         f"selector table: {old}")
    if any(".guard_metric: 'eval_accuracy" in d for d in diffs):
        hints.append("the checkpoint's guard steered on the test split (guard_metric = 'eval_accuracy...'), which "
                     "flexkit now refuses: its selections saw the exam, so the run cannot continue under the "
                     "validation split's name (val_accuracy); start a new run")
    return hints
