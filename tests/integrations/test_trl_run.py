"""``[trainer] type = "trl"``: ``flexkit run`` and ``flexkit compare`` training a tiny Llama with TRL's GRPO.

Every run here builds the model from a config with the example's local tokenizer (nothing downloaded) and runs a
few steps on the CPU with one thread, so results are deterministic: a resumed run must equal an uninterrupted
one exactly.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
torch = pytest.importorskip("torch")
pytest.importorskip("flexkit_toyrl")  # the arithmetic storage

from flexkit_trl.run_config import TRLRunConfig  # noqa: E402 - after the skips
from flexkit_trl.run_trainer import TRLRunTrainer  # noqa: E402

from flexkit import ConfigError, load_pipeline, run_pipeline  # noqa: E402
from flexkit.compare import compare, parse_setting  # noqa: E402
from flexkit.run._runner import new_trainer  # noqa: E402
from flexkit.testing import crash_run, read_metrics, without_clock  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_run"
TOKENIZER = EXAMPLE / "tokenizer"
#: The plugin module, named in each pipeline (the installed metadata may predate its entry point).
PLUGIN = "flexkit_trl.plugin"
MODEL = ('{ model_type = "llama", hidden_size = 16, intermediate_size = 32, num_hidden_layers = 1, '
         'num_attention_heads = 2, num_key_value_heads = 2, max_position_embeddings = 32 }')


def pipeline_text(*, steps: int = 6, extra: str = "", trainer: str = "") -> str:
    """A small arithmetic pipeline with the trl trainer: 4 prompts x 4 completions per step."""
    return f"""
plugins = ["{PLUGIN}"]

[run]
batch_size = 4
seed = 3
total_steps = {steps}
eval_every = 3
checkpoint_every = 2

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 200
levels = [1, 2]

[tasksets.selector]
type = "learnability"
feature_keys = ["level"]
{extra}
[trainer]
type = "trl"
model_config = {MODEL}
model = "{TOKENIZER}"
rows = "arithmetic"
reward = "prefix_match"
group_size = 4
max_completion_length = 3
learning_rate = 0.01
eval_levels = [1, 2]
eval_tasks_per_level = 8
{trainer}
"""


def file_pipeline(name: str, selector: str, trainer: str) -> str:
    """Two steps of the trl trainer over the rows of ``train.jsonl`` (taskset ``name`` with ``selector``, an inline
    table), 2 completions of 2 tokens each, evaluated at the end; ``trainer`` adds lines to its table."""
    return f"""
plugins = ["{PLUGIN}"]
[run]
batch_size = 2
seed = 0
total_steps = 2
eval_every = 2
[[tasksets]]
name = "{name}"
path = "train.jsonl"
selector = {selector}
[trainer]
type = "trl"
model_config = {MODEL}
model = "{TOKENIZER}"
group_size = 2
max_completion_length = 2
{trainer}
"""


def write(tmp_path: Path, text: str, name: str = "pipeline.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def steps(run_dir: Path) -> list[dict[str, Any]]:
    """The run's step records (the initial evaluation left out), without their wall clock."""
    return without_clock(read_metrics(run_dir)[1:])


def test_a_run_trains_evaluates_per_level_checkpoints_and_resumes_exactly(tmp_path: Path) -> None:
    path = write(tmp_path, pipeline_text())
    full = run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    records = read_metrics(tmp_path / "full")
    assert records[0]["step"] == -1 and set(records[0]) >= {"flexkit/eval/accuracy", "flexkit/eval/accuracy/1",
                                                            "flexkit/eval/accuracy/2"}
    assert [r["step"] for r in records[1:]] == list(range(6))
    evaluated = [r for r in records[1:] if "flexkit/eval/accuracy" in r]
    assert [r["step"] for r in evaluated] == [2, 5]  # eval_every = 3
    assert all(0.0 <= r["flexkit/eval/accuracy/1"] <= 1.0 for r in evaluated)
    assert set(full.last_eval) == {"eval_accuracy", "eval_accuracy/1", "eval_accuracy/2"}
    # TRL's own metrics, one record per step: its rewards, its loss, the schedule's rate
    assert {"reward", "rewards/prefix_match/mean", "completions/mean_length", "entropy", "loss", "grad_norm",
            "learning_rate"} <= set(records[1])
    assert [r["flexkit/run/rollouts"] for r in records[1:]] == [16 * (i + 1) for i in range(6)]
    assert (tmp_path / "full" / "checkpoint").is_dir()
    assert any(r["grad_norm"] > 0 for r in records[1:])  # groups with a reward spread moved the weights
    # killed in step 5 (last checkpoint: step 4), resumed: the same records as the uninterrupted run
    crash_run(load_pipeline(path), tmp_path / "broken", 5)
    assert len(steps(tmp_path / "broken")) == 5
    resumed = run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    assert steps(tmp_path / "broken") == steps(tmp_path / "full")
    assert resumed.last_eval == full.last_eval


def test_replay_weighs_replayed_rows_by_their_generating_policy_and_resumes_exactly(tmp_path: Path) -> None:
    replay = "\n[replay]\ngroups = 2\nmax_age = 2\n"
    path = write(tmp_path, pipeline_text(steps=5, extra=replay, trainer="max_prompt_length = 12"))
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "full", progress=None)
    records = steps(tmp_path / "full")
    assert max(r["flexkit/replay/groups"] for r in records) > 0
    crash_run(load_pipeline(path), tmp_path / "broken", 3)
    run_pipeline(load_pipeline(path), run_dir=tmp_path / "broken", resume=True, progress=None)
    assert steps(tmp_path / "broken") == records
    # the clipped ratio: rows whose generating policy gave their tokens e times today's probability have ratio
    # 1/e < 1 - epsilon, so negative advantages there carry no gradient (PPO's clipped term); as fresh rows they do
    pipe = load_pipeline(path)
    trainer = new_trainer(pipe)
    trainer.setup(pipe)
    batch = trainer.rollout(pipe.scheduler.read(), step=0).batch
    trainer.compute_advantages(batch, step=0)
    batch["advantages"] = -batch["response_mask"]
    fresh = trainer.state_dict()
    trainer.update(batch, None, step=0)
    moved = trainer.state_dict()["model"]
    assert any(not (moved[k] == fresh["model"][k]).all() for k in moved)
    trainer.load_state_dict(fresh)
    batch["old_log_probs"] = batch["old_log_probs"] + 1.0
    batch["replay_age"] = torch.ones(batch.batch_size, dtype=torch.int64).numpy()
    trainer.update(batch, None, step=0)
    kept = trainer.state_dict()["model"]
    assert all((kept[k] == fresh["model"][k]).all() for k in kept)


def test_dynamic_sampling_refills_dropped_groups_and_trains_once_on_the_kept_rows(tmp_path: Path) -> None:
    refill = """
[sample]
mechanism = "select"

[sample.scorer]
type = "group_reward_range"

[sample.actuator]
type = "zero_variance_filter"
max_rounds = 2

[sample.refill]
"""
    text = pipeline_text(steps=3, extra=refill, trainer="max_prompt_length = 12")
    text = text.replace("checkpoint_every = 2", "checkpoint_every = 2\nprefetch = false")
    run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "run", progress=None)
    records = steps(tmp_path / "run")
    assert any(r["flexkit/sample/filter_rounds"] == 2 for r in records)  # a round refilled the dropped groups
    assert all(r["flexkit/run/rollouts"] >= 16 * (i + 1) for i, r in enumerate(records))


def test_compare_runs_two_settings_and_a_second_call_continues_the_folder(tmp_path: Path) -> None:
    path = write(tmp_path, pipeline_text(steps=3))
    settings = [parse_setting("slow:trainer.learning_rate=0.001"), parse_setting("fast:trainer.learning_rate=0.03")]
    out = tmp_path / "compare"
    first = compare(path, settings, [0], out, progress=io.StringIO(), plots=False)
    assert not first.failures and [len(r.runs) for r in first.results] == [1, 1]
    assert all("eval_accuracy/1" in r.runs[0].level_curves and r.runs[0].steps == 3 for r in first.results)
    slow, fast = (next(p for p in out.rglob("metrics.jsonl") if name in str(p)) for name in ("slow", "fast"))
    slow_text = slow.read_text()
    (fast.parent / "setting.json").unlink()  # the fast run did not finish: the next call reruns it, reuses slow
    log = io.StringIO()
    second = compare(path, settings, [0], out, progress=log, plots=False)
    assert "(1 finished before, reused)" in log.getvalue() and log.getvalue().count(": reused (") == 1
    assert slow.read_text() == slow_text and fast.is_file()
    assert [r.runs[0].final for r in second.results] == [r.runs[0].final for r in first.results]


def test_the_example_runs_a_few_steps(tmp_path: Path) -> None:
    overrides = ["run.total_steps=2", "run.eval_every=2", "run.checkpoint_every=2", "trainer.eval_tasks_per_level=4"]
    pipe = load_pipeline(EXAMPLE / "pipeline.toml", plugins=[PLUGIN], overrides=overrides)
    result = run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert result.steps == 2 and {"eval_accuracy/1", "eval_accuracy/2"} <= set(result.last_eval)
    assert (tmp_path / "run" / "checkpoint").is_dir()


def test_columns_rows_eval_data_and_a_reward_by_import_path(tmp_path: Path) -> None:
    rows = [{"prompt": f"{i} + {j} =", "answer": str(i + j), "source": "even" if (i + j) % 2 == 0 else "odd"}
            for i in range(4) for j in range(4)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (tmp_path / "my_reward.py").write_text(
        "def one_for_sevens(completions, answer, **kwargs):\n"
        "    return [float(c.strip().startswith('7')) for c in completions]\n")
    text = file_pipeline("sums", '{ type = "random" }', 'reward = "my_reward:one_for_sevens"\n'
                         'eval_data = "held_out.jsonl"\neval_group_column = "source"')
    result = run_pipeline(load_pipeline(write(tmp_path, text)), run_dir=tmp_path / "run", progress=None)
    assert set(result.last_eval) == {"eval_accuracy", "eval_accuracy/even", "eval_accuracy/odd"}
    assert "rewards/one_for_sevens/mean" in steps(tmp_path / "run")[0]


def test_the_guide_s_own_model_table_validates(tmp_path: Path) -> None:
    guide = (EXAMPLE.parents[1] / "docs" / "integrations" / "trl.md").read_text(encoding="utf-8")
    block = guide.split("# my_pipeline.toml\n", 1)[1].split("```", 1)[0]
    pipe = load_pipeline(write(tmp_path, f'plugins = ["{PLUGIN}"]\n{block}'))
    assert pipe.config.trainer is not None and pipe.config.trainer.type == "trl"
    assert pipe.config.trainer.config.grpo_args == {"weight_decay": 0.01, "top_k": 50}


@pytest.mark.parametrize(("settings", "message"), [
    ({"tokenizer": "t"}, "model"),  # the model (or, with model_config, its tokenizer folder) must be named
    ({"model_config": {"hidden_size": 8}, "model": "t"}, "model_type"),
    ({"model": "m", "reward": "not a path"}, "reward must be"),
    ({"model": "m", "grpo_args": {"max_steps": 3}}, "may not set max_steps"),
    ({"model": "m", "group_size": 1}, "group_size"),
    ({"model": "m", "no_such_key": 1}, "no_such_key"),
])
def test_the_config_is_checked_strictly(tmp_path: Path, settings: dict[str, Any], message: str) -> None:
    def toml(value: Any) -> str:
        if isinstance(value, dict):
            return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"
        return json.dumps(value)

    lines = "\n".join(f"{key} = {toml(value)}" for key, value in settings.items())
    text = f'plugins = ["{PLUGIN}"]\n[run]\nbatch_size = 2\ntotal_steps = 1\n[[tasksets]]\nname = "a"\n' \
           f'storage_type = "arithmetic"\nsize = 10\n[trainer]\ntype = "trl"\n{lines}\n'
    with pytest.raises(ConfigError, match=message):
        load_pipeline(write(tmp_path, text))


def test_columns_rows_without_eval_data_are_refused_before_training(tmp_path: Path) -> None:
    text = pipeline_text().replace('rows = "arithmetic"', 'rows = "columns"')
    pipe = load_pipeline(write(tmp_path, text))
    with pytest.raises(ConfigError, match="eval_data"):
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert TRLRunTrainer.supports_replay and TRLRunConfig.__doc__


GUARDED = """
[tasksets.selector]
type = "frontier"
feature_keys = ["level"]
retain = 1.0
guard_metric = "val_accuracy/{}"
"""


def _guarded(steps: int = 3, trainer: str = "val_tasks_per_level = 6") -> str:
    text = pipeline_text(steps=steps, trainer=trainer)
    return text.replace('[tasksets.selector]\ntype = "learnability"\nfeature_keys = ["level"]\n', GUARDED)


def test_the_validation_split_is_apart_from_the_test_set_and_is_what_the_guard_reads(tmp_path: Path) -> None:
    from flexkit_trl.run_rows import arithmetic_eval_rows, arithmetic_val_rows

    config = TRLRunConfig(model="m", eval_levels=(1, 2, 3), eval_tasks_per_level=50, val_tasks_per_level=40)
    test = arithmetic_eval_rows(config)
    val = arithmetic_val_rows(config, test)
    pairs = [(r["a"], r["b"]) for r in val]
    assert len(val) == 120 and len(set(pairs)) == len(pairs)
    assert not set(pairs) & {(r["a"], r["b"]) for r in test}
    pipe = load_pipeline(write(tmp_path, _guarded()))
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    records = steps(tmp_path / "run")
    assert any("flexkit/val/accuracy/1" in r for r in records) and any("flexkit/eval/accuracy/1" in r for r in records)
    held_out = pipe.scheduler.state_dict()["selectors"][0]["held_out"]
    assert list(held_out["evaluated"]) == [True, True]
    last = [r for r in records if "flexkit/val/accuracy/1" in r][-1]
    assert held_out["latest"][0] == pytest.approx(last["flexkit/val/accuracy/1"])  # validation, not test


def test_a_guard_without_a_validation_split_is_refused_before_training(tmp_path: Path) -> None:
    pipe = load_pipeline(write(tmp_path, _guarded(trainer="val_tasks_per_level = 0")))
    with pytest.raises(ConfigError, match=r"tasksets\[0\]\.selector\.guard_metric: reads the validation split, and "
                                          r"the trl trainer has none"):
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)


def _topic_files(tmp_path: Path, *, val_topic: bool = True) -> None:
    """Training, test and validation rows with a ``topic`` column (the validation rows without it on request)."""
    rows = [{"question": f"{i} + {j} =", "answer": str(i + j), "topic": "even" if (i + j) % 2 == 0 else "odd"}
            for i in range(5) for j in range(5)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    val = [r if val_topic else {k: v for k, v in r.items() if k != "topic"} for r in rows[6:12]]
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in val))


def _topic_pipeline(guard: str, trainer: str = "") -> str:
    return file_pipeline("mine", f'{{ type = "frontier", feature_keys = ["topic"], guard_metric = "{guard}" }}',
                         f'prompt_column = "question"\neval_data = "test.jsonl"\nval_data = "val.jsonl"\n{trainer}')


def test_regression_the_held_out_rows_are_grouped_by_the_selectors_column_by_default(tmp_path: Path) -> None:
    """Held-out rows were grouped by "level" unless eval_group_column was set, so the quickstart's guard on a
    user's own column failed at the first evaluation with a message that never named eval_group_column."""
    _topic_files(tmp_path)
    pipe = load_pipeline(write(tmp_path, _topic_pipeline("val_accuracy/{}")))
    result = run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert set(result.last_eval) == {"eval_accuracy", "eval_accuracy/even", "eval_accuracy/odd"}
    assert list(pipe.scheduler.state_dict()["selectors"][0]["held_out"]["evaluated"]) == [True, True]


@pytest.mark.parametrize(("guard", "trainer", "val_topic", "message"), [
    ("val_accuracy/{}", 'eval_group_column = "Topic"',  True,
     r"trainer\.eval_group_column: is 'Topic', but the selector's guard reads val_accuracy/<value of 'topic'>"),
    ("", 'eval_group_column = "Topic"', True,
     r"trainer\.eval_group_column: is 'Topic', and no row of trainer\.eval_data has it \(their columns: 'answer', "
     r"'question', 'topic'\)"),
    ("val_accuracy/{}", "", False,
     r"trainer\.val_data: 6 of the 6 validation rows \(the first: row 0\) have no 'topic', the column the "
     r"selector's guard reads"),
])
def test_regression_a_held_out_grouping_that_cannot_work_is_refused_before_training(
        tmp_path: Path, guard: str, trainer: str, val_topic: bool, message: str) -> None:
    """A wrong eval_group_column with the guard off was dropped without a word; with the guard on, it (or
    validation rows without the column) failed at the first evaluation without naming the setting."""
    _topic_files(tmp_path, val_topic=val_topic)
    pipe = load_pipeline(write(tmp_path, _topic_pipeline(guard, trainer)))
    with pytest.raises(ConfigError, match=message):
        run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_regression_validate_reads_the_trl_trainers_files_and_columns(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """flexkit validate said "valid" for trl trainer tables that flexkit run refused at setup (a missing val_data
    file, a wrong answer_column, an eval_group_column no row has)."""
    from flexkit.cli.main import main

    _topic_files(tmp_path)
    cases = [('val_data = "val.jsonl"', 'val_data = "valid.jsonl"', "valid.jsonl"),
             ('prompt_column = "question"', 'prompt_column = "question"\nanswer_column = "answers"',
              r"trainer.answer_column: row 0 of taskset 'mine' has no 'answers' column"),
             ('prompt_column = "question"', 'prompt_column = "prompt"', "trainer.prompt_column"),
             ("group_size = 2", 'group_size = 2\neval_group_column = "Topic"', "trainer.eval_group_column")]
    for old, new, message in cases:
        path = write(tmp_path, _topic_pipeline("").replace(old, new), name="case.toml")
        assert main(["validate", str(path)]) == 1, new
        assert re.search(message, capsys.readouterr().err), new
    assert main(["validate", str(write(tmp_path, _topic_pipeline("val_accuracy/{}"), name="ok.toml"))]) == 0


def test_the_prompt_model_is_checked_on_the_validation_rows(tmp_path: Path) -> None:
    """The trl trainer hands the rows it validated, with their rewards, to a prompt model (text_key): each
    evaluation records its predictions of them beside their rewards."""
    _topic_files(tmp_path)
    text = _topic_pipeline("").replace('feature_keys = ["topic"], guard_metric = ""',
                                       'text_key = "question", bins = 2, retain = 0.5')
    pipe = load_pipeline(write(tmp_path, text))
    run_pipeline(pipe, run_dir=tmp_path / "run", progress=None)
    evaluated = [r for r in read_metrics(tmp_path / "run") if "flexkit/val/accuracy" in r]
    assert len(evaluated) == 2
    for record in evaluated:
        assert record["flexkit/selector/mine/val_rows"] == 6.0  # every validation row
        observed = [v for k, v in record.items() if k.startswith("flexkit/selector/mine/val_observed/")]
        counts = [v for k, v in record.items() if k.startswith("flexkit/selector/mine/val_rows/")]
        assert observed and sum(counts) == 6.0
        mean = sum(o * c for o, c in zip(observed, counts, strict=True)) / 6.0
        assert mean == pytest.approx(record["flexkit/val/accuracy"])  # the same rewards, pooled by group


def test_regression_arithmetic_validation_rows_carry_the_pools_prompt_text(tmp_path: Path) -> None:
    """With rows = "arithmetic" the validation rows' prompt was TRL's spaced text ("4 7 + 5 ="), not the pool's
    zero-padded one ("47+05="), so the prompt model judged its predictions on a text it never reads."""
    text = pipeline_text(steps=1, trainer="val_tasks_per_level = 5").replace(
        'levels = [1, 2]\n', 'levels = [1, 2]\nlabel = "none"\n', 1).replace(
        'type = "learnability"\nfeature_keys = ["level"]', 'type = "frontier"\ntext_key = "prompt"\nbins = 2')
    pipe = load_pipeline(write(tmp_path, text))
    trainer = new_trainer(pipe)
    trainer.setup(pipe)
    trainer.validate(step=0)
    rows = trainer.validation_rows()
    assert rows is not None and len(rows) == 10
    pool_prompt = pipe.scheduler.entries[0].taskset.read([0])[0]["prompt"]
    assert {len(p) for p in rows.columns["prompt"]} == {len(pool_prompt)} == {len("47+05=")}
    assert rows.columns["prompt"] == [f"{a:02d}+{b:02d}=" for a, b in zip(rows.columns["a"], rows.columns["b"],
                                                                         strict=True)]
