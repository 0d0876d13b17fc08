"""The errors policy (``flexkit/errors.py``): what a user or a plugin can cause is a flexkit error, and nothing
relabels another error by catching a bare builtin.

Read with ``ast`` over ``flexkit/`` (and, for ``except`` clauses, the first-party plugins' packages):

- ``raise ValueError / TypeError / RuntimeError / KeyError`` only at the internal sites of :data:`INTERNAL_RAISES`
  (a bug of flexkit itself, or a protocol that names the builtin), each with its reason;
- ``except`` clauses (and ``contextlib.suppress``) catching a generic builtin (:data:`GENERIC`) only in the
  functions of :data:`CAUGHT_BUILTINS`, each with its reason: a library's or the interpreter's error on data
  (``json``, ``numpy``, ``int()``), cleanup that re-raises, or a report that names the original error;
- every error class lives in ``flexkit/errors.py``, is exported by ``flexkit``, and by no other module's
  ``__all__``; docs and docstrings name errors through ``flexkit`` or ``flexkit.errors``.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexkit
from flexkit import errors

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "flexkit"
PLUGIN_PACKAGES = sorted(p for p in (ROOT / "plugins").glob("*/flexkit_*") if p.is_dir())

#: Builtins flexkit raises only at :data:`INTERNAL_RAISES`.
RAISED = frozenset({"ValueError", "TypeError", "RuntimeError", "KeyError"})
#: Builtins broad enough that catching them can relabel someone else's error.
GENERIC = frozenset({"BaseException", "Exception", "ValueError", "TypeError", "KeyError", "IndexError", "LookupError",
                     "AttributeError", "RuntimeError", "ArithmeticError"})

#: ``"path::function: Builtin"`` -> why the builtin is right there (nothing a user or a plugin causes reaches it).
INTERNAL_RAISES: dict[str, str] = {
    "flexkit/selectors/_members.py::flag: ValueError": "internal invariant: flexkit's own callers name a declared flag",
    "flexkit/scheduler/_batch_plan.py::mix_counts: ValueError":
        "internal invariant: the scheduler refuses a batch_size above all tasks when it is built",
    "flexkit/compare/_statistics.py::mean_interval: ValueError":
        "internal invariant: compare's reports call it with at least one value",
    "flexkit/compare/_statistics.py::t_quantile: ValueError": "internal invariant: mean_interval passes n - 1 >= 1",
    "flexkit/sample/_batch.py::RolloutBatch.concat_rows: ValueError":
        "internal invariant: the refill keeps one row selection per batch",
    "flexkit/selectors/difficulty_based/_compact_grid.py::CompactGrid.__init__: ValueError":
        "internal invariant: difficulty_based picks the grid's shape (and a taskset of 2^31 tasks cannot be loaded)",
    "flexkit/selectors/difficulty_based/_index_structures.py::SlabGrid.__init__: ValueError":
        "internal invariant: difficulty_based picks the grid's shape (and a taskset of 2^31 tasks cannot be loaded)",
    "flexkit/tasksets/_base.py::LazyFeatures.__getitem__: KeyError":
        "the Mapping protocol: a missing key is a KeyError",
    "flexkit/tasksets/_base.py::LazyFeatures.labels: KeyError": "the Mapping protocol, as __getitem__",
    "flexkit/tasksets/_memory.py::_json_default: TypeError":
        "json.dumps' default= protocol: TypeError means 'not serialisable' (caught by the digest right there)",
    "flexkit/testing/_registry.py::drive: ValueError": "internal invariant: flexkit's own list of stages is driven",
}

_DATA = "a library's error on data it is given (json, numpy, int(), ...), turned into the fitting flexkit error"
_CLEANUP = "cleanup or rollback, then the same exception is raised again"
_NAMED = "a component's or plugin's own error, reported naming the component and the original exception's type"

#: ``"path::function: Builtins"`` -> why catching those builtins there relabels nothing.
CAUGHT_BUILTINS: dict[str, str] = {
    "plugins/flexkit-rft-trl/flexkit_trl/run_trainer.py::_group_order: ValueError":
        "float() of a group label: a label that is no number sorts after the numbers",
    "flexkit/_files.py::open_regular: BaseException": _CLEANUP,
    "flexkit/annotate/_command.py::_load_trainer_state: Exception":
        _NAMED + " (a CheckpointError: the trainer's state)",
    "flexkit/annotate/_output.py::_unwritable: TypeError, ValueError": _DATA,
    "flexkit/annotate/_output.py::check_parquet_columns: TypeError, ValueError": _DATA + " (pyarrow)",
    "flexkit/annotate/_output.py::row_lines: TypeError, ValueError": _DATA,
    "flexkit/annotate/_partial.py::_line_problem: ValueError": _DATA,
    "flexkit/pipeline/_pipeline.py::_feature_array: ValueError": _DATA + " (numpy on a ragged column)",
    "flexkit/selectors/_prompt_model.py::text_column: KeyError":
        "a mapping lookup of the selector's text column: a missing column is a TasksetError naming it",
    "flexkit/pipeline/_checkpoint.py::_committed_arrays: KeyError, TypeError, ValueError":
        _DATA + " (a damaged state.json)",
    "flexkit/pipeline/_checkpoint.py::_locate_unserialisable: TypeError, ValueError":
        "probing json.dumps for the bad value",
    "flexkit/pipeline/_checkpoint.py::_read_arrays: Exception": _DATA + " (whatever numpy raises on hostile bytes)",
    "flexkit/pipeline/_checkpoint.py::_read_body: ValueError": _DATA,
    "flexkit/pipeline/_checkpoint.py::_serialise: KeyError, TypeError, ValueError": _DATA + " (a StateError)",
    "flexkit/pipeline/_checkpoint.py::_serialise: TypeError, ValueError": _DATA + " (a StateError)",
    "flexkit/pipeline/_checkpoint.py::_sniff_version: ValueError": _DATA,
    "flexkit/pipeline/_checkpoint.py::load_state: KeyError, TypeError, ValueError": _DATA + " (a CheckpointError)",
    "flexkit/cli/main.py::_output_cut: AttributeError, ValueError":
        "a replaced or closed stream has no file descriptor",
    "flexkit/cli/_compare.py::_number_list: ValueError": _DATA,
    "flexkit/cli/_registry.py::origin_of: AttributeError, KeyError, TypeError, ValueError":
        "an installer's direct_url.json that json or its layout refuses: its origin is shown as unknown, nothing fails",
    "flexkit/cli/_pipeline.py::_check_every_row: Exception":
        "flexkit validate reports every taskset's failure; a storage's own error is shown with its type",
    "flexkit/compare/_execution.py::run_in_order: Exception": "any error of one run is that run's failure, reported",
    "flexkit/compare/_run.py::_read_setting_file: ValueError": _DATA,
    "flexkit/config/_converter.py::_structure_attrs: ArithmeticError, TypeError, ValueError":
        "attrs' validator convention: a config class's validators signal an invalid value with these",
    "flexkit/config/_converter.py::describe: ValueError": "repr() of an int past Python's digit limit",
    "flexkit/config/_converter.py::structure: TypeError, ValueError":
        "cattrs' hook convention: a structure hook signals an invalid value with these",
    "flexkit/config/_loader.py::_first_failing_prefix.fails: Exception": "probing tomllib for the failing prefix",
    "flexkit/config/_loader.py::parse_toml: ValueError": _DATA + " (tomllib's int() past the digit limit)",
    "flexkit/config/_overrides.py::parse_seeds: ValueError": _DATA,
    "flexkit/plugins/_contract.py::registered_name_of: Exception":
        "a broken plugin must not replace the message being written",
    "flexkit/plugins/_contract.py::check_selection: Exception": _NAMED + " (a ComponentError: its indices)",
    "flexkit/plugins/_contract.py::component_bugs: Exception": _NAMED + " (a ComponentError)",
    "flexkit/distributed/_ledger.py::BatchLedger._check_id: TypeError": _DATA + " (operator.index)",
    "flexkit/distributed/_torch_dist.py::DistributedPipeline.apply_sample_stage: Exception":
        "gathered from every rank (so no rank waits forever) and raised on all, with its repr",
    "flexkit/distributed/_torch_dist.py::DistributedPipeline.feedback: Exception":
        "gathered from every rank (so no rank waits forever) and raised on all, with its repr",
    "flexkit/distributed/_torch_dist.py::DistributedPipeline.load_checkpoint: Exception":
        "broadcast from rank 0 (so no rank waits forever) and raised on all",
    "flexkit/distributed/_torch_dist.py::DistributedPipeline.save_checkpoint: Exception":
        "broadcast from rank 0 (so no rank waits forever) and raised on all, with its repr",
    "flexkit/distributed/_torch_dist.py::_concatenate: ValueError": _DATA,
    "flexkit/scheduler/feedback.py::PassRateCalculator.process: TypeError": _DATA + " (iterating the payload)",
    "flexkit/scheduler/feedback.py::_columns: TypeError, ValueError": _DATA,
    "flexkit/scheduler/feedback.py::_copied_row: Exception": "an object that cannot be copied is fed back as it is",
    "flexkit/scheduler/feedback.py::_rewards: TypeError, ValueError": _DATA,
    "flexkit/scheduler/feedback.py::_rows: TypeError, ValueError": _DATA,
    "flexkit/scheduler/feedback.py::task_triples: AttributeError, KeyError, TypeError":
        _DATA + " (an experience's fields)",
    "flexkit/scheduler/feedback.py::task_triples: TypeError": _DATA + " (iterating the payload)",
    "flexkit/scheduler/_feedback_apply.py::apply_feedback: Exception":
        _NAMED + " (a ComponentError; the payload rolled back)",
    "flexkit/scheduler/_scheduler.py::TasksetScheduler.evaluation: Exception":
        _NAMED + " (a ComponentError naming the selector)",
    "flexkit/scheduler/_scheduler.py::TasksetScheduler.validation_calibration: Exception":
        _NAMED + " (a ComponentError naming the selector)",
    "flexkit/integrations/_host_metrics.py::feedback_metrics: TypeError, ValueError": "metrics never stop a run",
    "flexkit/integrations/_host_metrics.py::group_mix_metrics: TypeError, ValueError": "metrics never stop a run",
    "flexkit/integrations/_state.py::to_portable: TypeError": "dtypes torch lacks are kept as lists",
    "flexkit/integrations/_torch.py::FlexkitSampler.locate: TypeError, ValueError": _DATA,
    "flexkit/integrations/_torch.py::_as_numpy: TypeError, ValueError": _DATA,
    "flexkit/scheduler/_observers.py::notify: Exception": "an observer's failure is logged with its type, not raised",
    "flexkit/pipeline/_state.py::refusing_component: Exception": "probing which component refuses its part of a state",
    "flexkit/pipeline/_pipeline.py::Pipeline.load_checkpoint: Exception": _NAMED + " (a CheckpointError)",
    "flexkit/pipeline/_pipeline.py::Pipeline.load_state_dict: BaseException": _CLEANUP,
    "flexkit/plot/_figures.py::_natural: ValueError": _DATA,
    "flexkit/plot/_figures.py::_resolved: ValueError": "best effort: a plot without target lines, the sample stage "
                                                      "read from the records",
    "flexkit/plot/_figures.py::_targets: KeyError, TypeError": "best effort: a plot without target lines",
    "flexkit/pipeline/_grouping.py::_natural: ValueError": _DATA,
    "flexkit/plugins/_registrar.py::Component.build: AttributeError, TypeError":
        "a frozen or slotted component keeps its class's name",
    "flexkit/plugins/_local_import.py::exit_is_import_error: BaseException": "sys.exit() while importing a plugin",
    "flexkit/plugins/_local_import.py::exit_is_import_error: Exception": "re-raised as it is",
    "flexkit/plugins/_local_import.py::load_local_module: BaseException": _CLEANUP,
    "flexkit/plugins/_manager.py::PluginHost._load_entry_points: Exception": _NAMED + " (a plugin failure)",
    "flexkit/plugins/_manager.py::PluginHost.add: Exception": _NAMED + " (a plugin failure)",
    "flexkit/plugins/_manager.py::PluginHost.add_local: Exception": _NAMED + " (cannot load plugin ...)",
    "flexkit/scheduler/_prefetch.py::Prefetcher._run: BaseException": "handed to the reader and raised there, as it is",
    "flexkit/sample/_replay.py::ReplayBuffer.load_state_dict: RuntimeError, TypeError, ValueError":
        _DATA + " (numpy and torch on a checkpoint's stored rows: a CheckpointError)",
    "flexkit/run/_folder.py::_is_pipeline_file: ValueError": "a NUL byte in a path: not a file",
    "flexkit/run/_folder.py::read_metrics: ValueError": _DATA,
    "flexkit/run/_folder.py::resume_run_folder: Exception": _NAMED + " (a CheckpointError: the trainer's state)",
    "flexkit/run/_runner.py::_committed_step: KeyError, TypeError, ValueError": _DATA + " (best effort, a fallback)",
    "flexkit/sample/actuators/static.py::StaticMixer.act: ValueError": _DATA + " (int() of a taskset name)",
    "flexkit/sample/_batch.py::RolloutBatch.__getitem__: KeyError": "dict lookup, a SampleError listing the fields",
    "flexkit/sample/_batch.py::RolloutBatch.group_index: TypeError": _DATA + " (unhashable group values)",
    "flexkit/sample/_batch.py::_per_sample_array: TypeError, ValueError": _DATA + " (ragged values)",
    "flexkit/sample/_output_checks.py::check_score_output: TypeError, ValueError":
        _DATA + " (the scores a scorer returned, a SampleError naming it)",
    "flexkit/scheduler/_scheduler.py::TasksetScheduler._produce: Exception":
        "carried with the selection and raised as it is",
    "flexkit/scheduler/_state.py::SchedulerState.load_state_dict: Exception": _CLEANUP,
    "flexkit/selectors/_base.py::checked_load.load_state_dict: ArithmeticError, AttributeError, IndexError, "
    "KeyError, TypeError, ValueError":
        "a selector's own load_state_dict failing on a state that does not fit it: restored to the state before "
        "and reported as StateMismatchError naming the selector and the original error",
    "flexkit/scheduler/_state.py::SchedulerState._load: ArithmeticError, AttributeError, IndexError, KeyError, "
    "TypeError, ValueError":
        "a selector's load_state_dict failing on a saved state that does not fit it, reported as "
        "StateMismatchError naming the taskset, the selector and the original error",
    "flexkit/run/_schema_line.py::retarget_schema_line: ValueError": "os.path.relpath across drives",
    "flexkit/selectors/_grouping.py::_any_column: Exception":
        "a taskset refusing a non-numeric column: read as labels, else raised as it is",
    "flexkit/selectors/_grouping.py::_any_column: KeyError": "the Mapping protocol: a missing feature column",
    "flexkit/selectors/_estimates.py::load_array: TypeError, ValueError": _DATA,
    "flexkit/selectors/_base.py::read_feature_columns: Exception": "a lazy mapping that cannot list its keys",
    "flexkit/selectors/_base.py::read_feature_columns: KeyError": "the Mapping protocol: a missing feature column",
    "flexkit/selectors/_base.py::validate_feedback: TypeError, ValueError": _DATA,
    "flexkit/tasksets/_base.py::Taskset._indices: TypeError, ValueError": _DATA,
    "flexkit/tasksets/_json_file.py::JsonTaskset.__init__: ValueError": _DATA + " (UnicodeDecodeError)",
    "flexkit/tasksets/_jsonl.py::JsonlTaskset.__init__: BaseException": _CLEANUP,
    "flexkit/tasksets/_jsonl.py::JsonlTaskset._extract: KeyError": "dict lookup of a row's feature",
    "flexkit/tasksets/_jsonl.py::JsonlTaskset._parse: ValueError": _DATA,
    "flexkit/tasksets/_jsonl.py::_problem: ValueError": _DATA,
    "flexkit/tasksets/_memory.py::InMemoryTaskset.__init__: TypeError, ValueError": _DATA,
    "flexkit/tasksets/_memory.py::_content_digest: TypeError, ValueError": "rows JSON cannot hold have no digest",
    "flexkit/_state_problems.py::plain_number: Exception": "whatever a foreign array type raises: not a number",
    "plugins/flexkit-rft-ray/flexkit_ray/__init__.py::run_worker: BaseException": _CLEANUP,
    "plugins/flexkit-rft-trinity/flexkit_trinity/config.py::is_flexkit_selector_type: Exception":
        "Trinity-RFT's own registry refusing an unknown name: not a flexkit selector",
    "plugins/flexkit-rft-trinity/flexkit_trinity/selector.py::_read_features: TypeError, ValueError": _DATA,
    "plugins/flexkit-rft-trinity/flexkit_trinity/state.py::decode: KeyError":
        "join_arrays: the tree names an array the blob lacks",
    "plugins/flexkit-rft-trinity/flexkit_trinity/state.py::decode: TypeError, ValueError": _DATA + " (base64)",
    "plugins/flexkit-rft-trinity/flexkit_trinity/state.py::decode: ValueError": _DATA + " (numpy)",
    "plugins/flexkit-rft-verl/flexkit_verl/dataset.py::dataset_indices: TypeError, ValueError": _DATA,
    "plugins/flexkit-rft-verl/flexkit_verl/resume.py::restore_sampler: Exception":
        _DATA + " (whatever torch.load refuses, named in a CheckpointError)",
    "plugins/flexkit-rft-verl/flexkit_verl/replay.py::VerlReplay.load: Exception":
        _DATA + " (whatever torch.load refuses, named in a CheckpointError)",
    "plugins/flexkit-rft-verl/flexkit_verl/replay.py::_from_portable: AttributeError, KeyError, TypeError, ValueError":
        _DATA + " (a saved [replay] buffer of the wrong shape, named in a CheckpointError)",
    "plugins/flexkit-rft-verl/flexkit_verl/replay_rows.py::json_column: TypeError, ValueError":
        _DATA + " (json.dumps of a verl non-tensor field, named in a SampleError)",
}

#: Exception classes defined outside ``flexkit/errors.py``, and why they are not flexkit errors.
OTHER_EXCEPTION_CLASSES: dict[str, str] = {
    "flexkit/_files.py::NotRegularFileError": "an OSError of the file helpers, caught where files are opened",
    "flexkit/scheduler/_prefetch.py::RowsFailed": "internal: carries a failed read's selection to the reader",
    "flexkit/testing/_runs.py::Crash": "the contract kit's simulated crash (a BaseException no code catches)",
}


class _Scan(ast.NodeVisitor):
    """Collects ``raise`` sites of :data:`RAISED`, handlers of :data:`GENERIC` and exception classes of a file."""

    def __init__(self, rel: str) -> None:
        self.rel, self.stack = rel, []
        self.raises: set[str] = set()
        self.catches: set[str] = set()
        self.classes: set[str] = set()

    def _where(self) -> str:
        return f"{self.rel}::{'.'.join(self.stack) or '<module>'}"

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _scope

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in
                 node.bases}
        if any(b.endswith(("Error", "Exception")) or b == "BaseException" for b in bases):
            self.classes.add(f"{self.rel}::{node.name}")
        self._scope(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id in RAISED:
            self.raises.add(f"{self._where()}: {exc.id}")
        self.generic_visit(node)

    def _caught(self, names: set[str]) -> None:
        if names & GENERIC:
            self.catches.add(f"{self._where()}: {', '.join(sorted(names & GENERIC))}")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is None:
            self.catches.add(f"{self._where()}: (bare except)")
        else:
            self._caught({n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)})
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "suppress":
            self._caught({a.id for a in node.args if isinstance(a, ast.Name)})
        self.generic_visit(node)


def _scan(files: list[Path]) -> _Scan:
    total = _Scan("")
    for path in files:
        scan = _Scan(path.relative_to(ROOT).as_posix())
        scan.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        total.raises |= scan.raises
        total.catches |= scan.catches
        total.classes |= scan.classes
    return total


def core_files() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def plugin_files() -> list[Path]:
    return sorted(p for pkg in PLUGIN_PACKAGES for p in pkg.rglob("*.py"))


CORE_SCAN = _scan(core_files())
ALL_SCAN = _scan(core_files() + plugin_files())


def test_flexkit_raises_builtins_only_at_internal_sites() -> None:
    new = sorted(CORE_SCAN.raises - set(INTERNAL_RAISES))
    assert not new, ("raise a flexkit error (flexkit/errors.py) for what a user or a plugin can cause; a true "
                     f"internal invariant goes into INTERNAL_RAISES with its reason: {new}")
    stale = sorted(set(INTERNAL_RAISES) - CORE_SCAN.raises)
    assert not stale, f"INTERNAL_RAISES lists sites that no longer raise: {stale}"


def test_generic_builtins_are_caught_only_where_listed_with_a_reason() -> None:
    new = sorted(ALL_SCAN.catches - set(CAUGHT_BUILTINS))
    assert not new, ("catch the flexkit error meant (a plugin's own ValueError must surface as itself, not as a "
                     f"config or taskset issue), or list the clause in CAUGHT_BUILTINS with its reason: {new}")
    stale = sorted(set(CAUGHT_BUILTINS) - ALL_SCAN.catches)
    assert not stale, f"CAUGHT_BUILTINS lists clauses that are gone: {stale}"
    assert all(reason.strip() for reason in [*CAUGHT_BUILTINS.values(), *INTERNAL_RAISES.values()])


def test_error_classes_live_in_flexkit_errors() -> None:
    elsewhere = {c for c in CORE_SCAN.classes if not c.startswith("flexkit/errors.py::")}
    assert elsewhere == set(OTHER_EXCEPTION_CLASSES), "define flexkit's errors in flexkit/errors.py"


def flexkit_error_classes() -> list[type[BaseException]]:
    return sorted((v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.FlexkitError)),
                  key=lambda c: c.__name__)


def test_every_flexkit_error_is_exported_by_flexkit_and_only_there() -> None:
    for cls in flexkit_error_classes():
        assert cls.__module__ == "flexkit.errors"
        assert cls.__name__ in flexkit.__all__ and getattr(flexkit, cls.__name__) is cls, cls.__name__
    names = {cls.__name__ for cls in flexkit_error_classes()}
    assert set(errors.__all__) == names | {"ConfigIssue"}
    for path in core_files():
        if path.name == "errors.py" or path == CORE / "__init__.py":
            continue
        listed = set(_all_of(path)) & names
        assert not listed, f"{path.relative_to(ROOT)} lists {sorted(listed)} in __all__; their home is flexkit.errors"


def _all_of(path: Path) -> list[str]:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
    return []


@pytest.mark.parametrize("cls", flexkit_error_classes(), ids=lambda c: c.__name__)
def test_errors_that_replaced_a_builtin_still_are_one(cls: type[BaseException]) -> None:
    """Code that caught the builtin flexkit raised before still catches its flexkit error."""
    assert cls.__doc__ and cls.__doc__.strip()
    if cls.__name__.endswith("TypeError"):
        assert issubclass(cls, TypeError)
    if issubclass(cls, (errors.ConfigError, errors.FeedbackError, errors.ComponentError, errors.SampleError,
                        errors.TasksetError, errors.StateMismatchError)):
        assert issubclass(cls, ValueError)


def _texts() -> Iterator[tuple[Path, str]]:
    for path in [*core_files(), *plugin_files(), *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        yield path, path.read_text(encoding="utf-8")


def test_docs_and_docstrings_name_errors_by_their_home() -> None:
    names = "|".join(sorted(c.__name__ for c in flexkit_error_classes()))
    pattern = re.compile(rf"\bflexkit\.((?!errors\.)[a-z_][\w.]*)\.({names})\b")
    found = [f"{path.relative_to(ROOT)}: flexkit.{m.group(1)}.{m.group(2)}"
             for path, text in _texts() for m in pattern.finditer(text)]
    assert not found, f"name errors as flexkit.errors.X (or flexkit.X): {found}"


def test_docs_name_only_errors_that_exist() -> None:
    known = {c.__name__ for c in flexkit_error_classes()} | {n for n in dir(builtins) if n.endswith("Error")}
    pattern = re.compile(r"\bflexkit(?:\.errors)?\.([A-Z]\w*Error)\b")
    unknown = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path, text in _texts() for m in pattern.finditer(text)
               if m.group(1) not in known]
    assert not unknown, f"docs name errors flexkit does not have: {unknown}"


def _bad_selector_state() -> None:
    selector = flexkit.make_selector("shuffle", size=3)
    selector.load_state_dict({**selector.state_dict(), "permutation": [0, 1]})


def _bad_seeds() -> None:
    from flexkit.compare import parse_seeds

    parse_seeds("three")


def _not_a_batch() -> None:
    from flexkit.sample._batch import BatchAdapter

    BatchAdapter()(["not", "a", "batch"], who="test")


def _bad_declaration() -> None:
    type("Odd", (flexkit.Actuator,), {"mechanism": "drop"})


def _bad_scheduler_state() -> None:
    from flexkit.scheduler._scheduler import TasksetEntry

    entry = TasksetEntry(name="a", taskset=flexkit.InMemoryTaskset("a", size=3),
                         selector=flexkit.make_selector("shuffle", size=3))
    scheduler = flexkit.TasksetScheduler([entry], batch_size=1)
    scheduler.load_state_dict({**scheduler.state_dict(), "version": -1})


@pytest.mark.parametrize(("cause", "error", "builtin"), [
    (_bad_selector_state, errors.StateMismatchError, ValueError),
    (_bad_seeds, errors.ConfigError, ValueError),
    (_not_a_batch, errors.SampleTypeError, TypeError),
    (_bad_declaration, errors.ComponentTypeError, TypeError),
    (_bad_scheduler_state, errors.StateMismatchError, ValueError),
], ids=lambda v: getattr(v, "__name__", ""))
def test_what_users_and_plugins_cause_is_a_flexkit_error_and_still_the_old_builtin(
        cause: object, error: type[BaseException], builtin: type[BaseException]) -> None:
    with pytest.raises(error) as info:
        cause()  # type: ignore[operator]
    assert isinstance(info.value, errors.FlexkitError) and isinstance(info.value, builtin)
