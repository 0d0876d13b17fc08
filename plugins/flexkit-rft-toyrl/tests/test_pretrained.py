"""The shipped warm-started weights (flexkit_toyrl.pretrained): found for the examples, loaded whole, checked."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest

pytest.importorskip("flexkit_toyrl")
torch = pytest.importorskip("torch")

from flexkit_toyrl.config import ToyRLConfig  # noqa: E402
from flexkit_toyrl.pretrained import (  # noqa: E402
    FORMAT,
    PRETRAINED_DIR,
    PretrainedError,
    load_shipped,
    save_warm_start,
    shipped_path,
    warm_start_identity,
)
from flexkit_toyrl.trainer import ToyRLTrainer  # noqa: E402

from flexkit import load_pipeline  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TINY = ToyRLConfig(max_digits=2, d_model=16, n_heads=2, warmup_steps=3, eval_levels=(1, 2),
                   warmup_level_weights=(1.0,))


def _shapes(trainer: ToyRLTrainer) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in trainer.model.state_dict().items()}


def _params(trainer: ToyRLTrainer) -> dict[str, np.ndarray]:
    return {name: value.detach().numpy().copy() for name, value in trainer.model.state_dict().items()}


@pytest.mark.parametrize("example", ["quickstart.toml", "frontier/addition.toml", "frontier/multiplication.toml",
                                     "frontier/addition_dapo.toml", "pool/pool.toml", "pool2/pool.toml"])
def test_the_examples_start_from_shipped_weights(example: str) -> None:
    config = load_pipeline(EXAMPLES / example).config.trainer.config
    assert config.pretrained and shipped_path(config).is_file()


def test_every_shipped_file_is_named_by_its_identity() -> None:
    files = sorted(PRETRAINED_DIR.glob("*.npz"))
    assert files
    for path in files:
        with np.load(path, allow_pickle=False) as data:
            identity = json.loads(str(data["identity"]))
        assert identity.pop("format") == FORMAT
        identity["warmup_level_weights"] = tuple(identity["warmup_level_weights"])
        assert shipped_path(ToyRLConfig(**identity)) == path


def test_a_shipped_warm_start_is_loaded_instead_of_computed() -> None:
    config = load_pipeline(EXAMPLES / "frontier" / "addition.toml").config.trainer.config
    trainer, seen = ToyRLTrainer(config, seed=5), []
    trainer.set_progress(lambda phase, done, total: seen.append((phase, done, total)))
    trainer.warm_start()
    arrays, loss = load_shipped(config, _shapes(trainer))
    assert trainer.warm and trainer.warmup_loss == loss and 0 < loss < 1
    assert all(np.array_equal(_params(trainer)[name], arrays[name]) for name in arrays)
    assert seen == [("warm start", config.warmup_steps, config.warmup_steps)]  # one report, not 500


def test_pretrained_false_or_another_configuration_computes_the_warm_start(tmp_path: Path) -> None:
    assert not shipped_path(TINY).is_file()
    computed = ToyRLTrainer(attrs.evolve(TINY, pretrained=False), seed=0)
    computed.warm_start()
    default = ToyRLTrainer(TINY, seed=0)
    default.warm_start()  # nothing ships for TINY: computed, the same
    assert all(np.array_equal(a, b) for a, b in zip(_params(computed).values(), _params(default).values(), strict=True))


def test_saved_weights_load_whole_and_identical(tmp_path: Path) -> None:
    trainer = ToyRLTrainer(TINY, seed=0)
    path = save_warm_start(trainer, tmp_path)
    assert path == shipped_path(TINY, tmp_path) and path.name.startswith("add-")
    arrays, loss = load_shipped(TINY, _shapes(trainer), tmp_path)
    assert loss == trainer.warmup_loss
    assert {k: v.tolist() for k, v in arrays.items()} == {k: v.tolist() for k, v in _params(trainer).items()}
    # another warm-start parameter: another file name, so nothing is found
    assert load_shipped(attrs.evolve(TINY, warmup_seed=1), _shapes(trainer), tmp_path) is None
    # the RL-phase parameters are not part of the identity
    assert shipped_path(attrs.evolve(TINY, learning_rate=1e-3, group_size=4), tmp_path) == path


def test_a_file_that_does_not_hold_what_its_name_says_is_refused(tmp_path: Path) -> None:
    trainer = ToyRLTrainer(TINY, seed=0)
    path = save_warm_start(trainer, tmp_path)
    with np.load(path) as data:
        contents = {key: np.array(data[key]) for key in data.files}
    other = dict(contents, identity=np.array(json.dumps({**warm_start_identity(TINY), "warmup_seed": 9})))
    np.savez(path, **other)
    with pytest.raises(PretrainedError, match="holds the warm start of"):
        load_shipped(TINY, _shapes(trainer), tmp_path)
    np.savez(path, **{k: v for k, v in contents.items() if k != "model/head.bias"})
    with pytest.raises(PretrainedError, match="holds arrays"):
        load_shipped(TINY, _shapes(trainer), tmp_path)


def test_the_module_writes_one_file_per_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flexkit_toyrl.write_pretrained import main

    pipeline = tmp_path / "p.toml"
    pipeline.write_text('[run]\nbatch_size = 4\ntotal_steps = 1\n[[tasksets]]\nname = "a"\nstorage_type = '
                        '"arithmetic"\nsize = 50\nlevels = [1, 2]\n[tasksets.selector]\ntype = "random"\n'
                        '[trainer]\ntype = "toyrl"\nmax_digits = 2\nd_model = 16\nn_heads = 2\nwarmup_steps = 2\n'
                        'eval_levels = [1, 2]\nwarmup_level_weights = [1.0]\n')
    assert main([str(pipeline), "--out-dir", str(tmp_path / "w")]) == 0
    config = ToyRLConfig(max_digits=2, d_model=16, n_heads=2, warmup_steps=2, eval_levels=(1, 2),
                         warmup_level_weights=(1.0,))
    assert shipped_path(config, tmp_path / "w").is_file()
    assert "warm-start loss" in capsys.readouterr().out
