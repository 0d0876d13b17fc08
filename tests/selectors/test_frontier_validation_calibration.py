"""``frontier``'s prompt model checked on a validation split: rows it was never fed, with their scores, put in the
pool's quantile groups (:meth:`~flexkit.Selector.validation_calibration`). A model that learnt the pass rate from
the prompts predicts the held-out rows' scores in order; a constant model (or none) shows nothing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import structlog

import flexkit
from flexkit import ValidationRows
from flexkit.errors import FeedbackError
from flexkit.scheduler._tasks import TasksetEntry
from flexkit.selectors._calibration import average_ranks, binned_calibration, rank_correlation
from flexkit.selectors.frontier import FrontierSelector
from tests.selectors.test_frontier_text import LEVEL_PASS, addition_pool, text_selector, train


def held_out_rows(count: int = 1200, seed: int = 7) -> tuple[ValidationRows, np.ndarray]:
    """Prompts of a pool the selector never saw (another seed), each scored by one draw at its level's pass rate."""
    prompts, levels = addition_pool(count, seed=seed)
    scores = (np.random.default_rng(seed).random(count) < LEVEL_PASS[levels - 1]).astype(float)
    return ValidationRows({"prompt": prompts.tolist(), "level": levels.tolist()}, scores), levels


def test_a_trained_model_predicts_held_out_rows_in_order() -> None:
    sel, levels = text_selector()
    train(sel, levels, 80)
    rows, _ = held_out_rows()
    found = sel.validation_calibration(rows)
    names = [name for name in sel.groups.names if f"val_observed/{name}" in found]
    assert len(names) >= 4
    observed = [found[f"val_observed/{name}"] for name in names]
    predicted = [found[f"val_predicted/{name}"] for name in names]
    assert predicted == sorted(predicted)  # the groups are quantiles of the prediction
    assert observed[-1] - observed[0] > 0.6, observed  # the top group scores far above the bottom one
    assert found["val_rank_correlation"] > 0.6
    assert sum(found[f"val_rows/{name}"] for name in names) == found["val_rows"] == len(rows)
    # calibrated, not only ranked: each group's mean prediction is near its mean score
    assert max(abs(p - o) for p, o in zip(predicted, observed, strict=True)) < 0.2


def test_a_model_that_learnt_nothing_shows_nothing() -> None:
    """Before any feedback the model predicts 0.5 for every prompt (a constant): every row lands in one group and
    there is no rank correlation to report."""
    sel, _ = text_selector()
    found = sel.validation_calibration(held_out_rows()[0])
    groups = [key for key in found if key.startswith("val_observed/")]
    assert len(groups) == 1
    assert found[groups[0].replace("observed", "predicted")] == pytest.approx(0.5)
    assert "val_rank_correlation" not in found


def test_the_check_changes_nothing() -> None:
    sel, levels = text_selector(size=1200)
    train(sel, levels, 10)
    before = json.dumps(sel.state_dict(), default=lambda a: np.asarray(a).tolist(), sort_keys=True)
    sel.validation_calibration(held_out_rows(300)[0])
    after = json.dumps(sel.state_dict(), default=lambda a: np.asarray(a).tolist(), sort_keys=True)
    assert before == after


def test_rows_without_the_text_column_are_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexkit import _log

    monkeypatch.setattr(_log, "_cli_format", None)  # library use (a CLI test in this process may have set it)
    sel, levels = text_selector(size=600)
    train(sel, levels, 3)
    rows = ValidationRows({"level": [1, 2]}, [1.0, 0.0])
    chat = ValidationRows({"prompt": [[{"role": "user", "content": "1+1="}]]}, [1.0])
    with structlog.testing.capture_logs() as logs:
        assert sel.validation_calibration(rows) == {}
        assert sel.validation_calibration(rows) == {}
        assert sel.validation_calibration(chat) == {}
    said = [e for e in logs if e["event"] == "validation_rows_without_text"]
    assert len(said) == 1 and "no 'prompt' column" in said[0]["message"], said
    other, _ = text_selector(size=600)
    with structlog.testing.capture_logs() as logs:
        assert other.validation_calibration(chat) == {}
    assert ["does not hold text only" in e["message"] for e in logs
            if e["event"] == "validation_rows_without_text"] == [True]


@pytest.mark.parametrize("params", [{"feature_keys": ["level"]}, {}])
def test_selectors_without_a_prompt_model_predict_nothing(params: dict[str, Any]) -> None:
    sel = flexkit.make_selector("frontier", size=6, seed=0, features={"level": np.arange(6) % 3 + 1.0}, **params)
    assert sel.validation_calibration(ValidationRows({"level": [1, 2]}, [1.0, 0.0])) == {}
    random = flexkit.make_selector("random", size=6, seed=0)
    assert random.validation_calibration(ValidationRows({"prompt": ["1+1="]}, [1.0])) == {}


def test_validation_rows_refuse_what_is_not_rows() -> None:
    with pytest.raises(FeedbackError, match=r"'prompt' \(1\)"):
        ValidationRows({"prompt": ["a"]}, [1.0, 0.0])
    with pytest.raises(FeedbackError, match=r"row 1 has 2\.0"):
        ValidationRows({}, [1.0, 2.0])
    with pytest.raises(FeedbackError, match="row 0 has nan"):
        ValidationRows({}, [float("nan")])
    with pytest.raises(FeedbackError, match="scores must be a 1-D sequence of numbers"):
        ValidationRows({}, ["right"])
    with pytest.raises(FeedbackError, match="columns must map"):
        ValidationRows([("prompt", ["a"])], [1.0])  # type: ignore[arg-type]
    for columns, message in [({"prompt": "ab"}, r"'prompt' \(str\)"), ({"prompt": None}, "NoneType"),
                             ({"prompt": (t for t in "ab")}, "generator")]:
        with pytest.raises(FeedbackError, match=message):
            ValidationRows(columns, [1.0, 0.0])  # type: ignore[arg-type]
    for scores, message in [([[1.0, 0.0], [0.0, 1.0]], "2-D"), (["1"], "<U1"), ([object()], "object")]:
        with pytest.raises(FeedbackError, match=message):
            ValidationRows({}, scores)
    mine = np.array([1.0, 0.0])
    rows = ValidationRows({"prompt": ("a", "b")}, mine)
    mine[0] = 5.0  # the caller's array changes later: the rows keep what was checked
    assert rows.scores.tolist() == [1.0, 0.0] and not rows.scores.flags.writeable
    assert len(ValidationRows({"prompt": np.array(["a", "b"])}, [True, False])) == 2


def test_rank_correlation_matches_the_definition() -> None:
    assert average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [2.5, 0.0, 2.5, 1.0]
    x = np.array([0.1, 0.2, 0.3, 0.4])
    assert rank_correlation(x, np.array([0.0, 0.0, 1.0, 1.0])) == pytest.approx(np.corrcoef([0, 1, 2, 3],
                                                                                            [0.5, 0.5, 2.5, 2.5])[0, 1])
    assert rank_correlation(x, -x) == pytest.approx(-1.0)
    assert np.isnan(rank_correlation(x, np.ones(4)))
    assert np.isnan(rank_correlation(x[:1], x[:1]))


def test_binned_calibration_leaves_out_empty_groups() -> None:
    found = binned_calibration(np.array([0.1, 0.2, 0.9]), np.array([0.0, 1.0, 1.0]), np.array([0, 0, 2]),
                               ["q1", "q2", "q3"])
    assert found["val_predicted/q1"] == pytest.approx(0.15) and found["val_observed/q1"] == 0.5
    assert found["val_rows/q3"] == 1.0 and "val_rows/q2" not in found
    assert found["val_rows"] == 3.0


def test_the_scheduler_reports_by_taskset_and_names_a_selector_that_fails() -> None:
    sel, levels = text_selector(size=600)
    assert isinstance(sel, FrontierSelector)
    train(sel, levels, 3)

    class Broken(flexkit.Selector):
        def _select(self, batch_size: int, return_extra_info: bool) -> Any:
            return np.arange(batch_size), {}

        def validation_calibration(self, rows: ValidationRows) -> dict[str, float]:
            raise RuntimeError("boom")

    entry = TasksetEntry(name="text", taskset=flexkit.InMemoryTaskset("text", size=600), selector=sel)
    good = flexkit.TasksetScheduler([entry], batch_size=4, seed=0)
    found = good.validation_calibration(held_out_rows(50)[0])
    assert set(found) == {"text"} and found["text"]["val_rows"] == 50.0
    with pytest.raises(FeedbackError, match=r"flexkit\.ValidationRows"):
        good.validation_calibration({"prompt": ["a"]})  # type: ignore[arg-type]
    class Odd(Broken):
        def validation_calibration(self, rows: ValidationRows) -> dict[str, float]:
            return {"fine": 0.5, "nan": float("nan"), "text": "high"}  # type: ignore[dict-item]

    class NotFinite(Broken):
        def validation_calibration(self, rows: ValidationRows) -> dict[str, float]:
            return {"fine": 0.5, "nan": float("nan"), "inf": float("inf")}

    odd = flexkit.TasksetScheduler([TasksetEntry(name="odd", taskset=flexkit.InMemoryTaskset("odd", size=10),
                                                 selector=Odd(size=10, seed=0))], batch_size=4, seed=0)
    with pytest.raises(flexkit.ComponentError, match=r"mapping of names to numbers; got 'text': str"):
        odd.validation_calibration(held_out_rows(5)[0])
    finite = flexkit.TasksetScheduler([TasksetEntry(name="f", taskset=flexkit.InMemoryTaskset("f", size=10),
                                                    selector=NotFinite(size=10, seed=0))], batch_size=4, seed=0)
    assert finite.validation_calibration(held_out_rows(5)[0]) == {"f": {"fine": 0.5}}
    bad = flexkit.TasksetScheduler([TasksetEntry(name="broken", taskset=flexkit.InMemoryTaskset("broken", size=10),
                                                 selector=Broken(size=10, seed=0))], batch_size=4, seed=0)
    with pytest.raises(flexkit.ComponentError, match=r"taskset 'broken'.*boom.*validation rows"):
        bad.validation_calibration(held_out_rows(5)[0])
