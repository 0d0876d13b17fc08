"""``flexkit annotate`` with the embedded trainer (skipped without flexkit-rft-toyrl): a resumed call continues
with the generator state of the uninterrupted call."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flexkit_toyrl")

from flexkit_toyrl.trainer import ToyRLTrainer

from flexkit import load_pipeline

#: The smallest toyrl pipeline annotate needs: a taskset, a batch size, the tiny model (no selector, no sample stage).
TINY = """
[run]
batch_size = 8
seed = 3

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 40
levels = [1, 2, 3]

[trainer]
type = "toyrl"
max_digits = 3
d_model = 16
n_heads = 2
group_size = 4
warmup_steps = 5
warmup_batch_size = 16
warmup_level_weights = [0.5, 0.5]
eval_levels = [1, 2, 3]
"""


def test_annotate_interrupted_then_rerun_continues_the_generator_of_the_uninterrupted_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flexkit annotate`` with the toy trainer: after an error in the third chunk, the same call rolls the third
    chunk out with the generator state the uninterrupted call had there (the commit record holds it), and writes
    the same file. (The tiny warm-started model solves nothing, so the file alone would not show it.)"""
    import contextlib
    import hashlib

    import flexkit.annotate._command
    from flexkit.annotate._command import annotate

    path = tmp_path / "pipeline.toml"
    path.write_text(TINY)
    original = flexkit.annotate._command._pass_rates

    def run(out: str, fail_at: int = 0) -> list[str]:
        states: list[str] = []

        def recorded(trainer: ToyRLTrainer, tasks: list, samples: int) -> list[float]:
            states.append(hashlib.sha256(trainer.generator.get_state().numpy().tobytes()).hexdigest())
            if len(states) == fail_at:
                raise RuntimeError("the GPU went away")
            return original(trainer, tasks, samples)

        monkeypatch.setattr(flexkit.annotate._command, "_pass_rates", recorded)
        with contextlib.suppress(RuntimeError):
            annotate(load_pipeline(path), out=tmp_path / out, samples=4, progress=None)
        return states

    full = run("full.jsonl")
    assert len(full) == 5 and len(set(full)) == 5
    assert run("out.jsonl", fail_at=3) == full[:3]
    assert run("out.jsonl") == full[2:]  # continues at the third chunk, with its generator state
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "full.jsonl").read_bytes()
