"""The TRL A/B at a larger model, for a machine with one GPU: uniform sampling, uniform with the recipe's
``[replay]``, ``learnability`` with replay, and the recipe (``frontier`` by level with its guard on the validation
split, and replay), each trained by TRL's own ``GRPOTrainer`` through ``flexkit compare``
(``[trainer] type = "trl"``) on the generated addition pool, over three seeds, within about ten minutes on one
GPU. The model (a Llama of a few million parameters) is built locally from a config with the example's word-level
tokenizer: nothing is downloaded.

    python benchmarks/trl_gpu_ab.py --out runs/trl-gpu-ab           # on the GPU machine
    python benchmarks/trl_gpu_ab.py --out runs/trl-gpu-ab --quick   # a CPU smoke run of the same commands

The comparison folder holds ``results.md`` and ``results.json`` (rollouts to each target, final accuracy per
level, on the test split; the guard steers on the trainer's validation problems, apart from the test set); a second
call continues it. The script asserts nothing about time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "trl_run"

#: A Llama of about 3.2M parameters (hidden 256, 4 layers), the same tokenizer as the example.
MODEL = ('{ model_type = "llama", hidden_size = 256, intermediate_size = 688, num_hidden_layers = 4, '
         'num_attention_heads = 4, num_key_value_heads = 4, max_position_embeddings = 32 }')
#: The same at the example's size, for --quick.
TINY = ('{ model_type = "llama", hidden_size = 32, intermediate_size = 64, num_hidden_layers = 1, '
        'num_attention_heads = 2, num_key_value_heads = 2, max_position_embeddings = 32 }')


def pipeline_text(*, steps: int, model: str, batch: int, eval_tasks: int) -> str:
    """The A/B's base pipeline: uniform sampling without replay (the arms change the selector and add replay)."""
    return f"""#:schema ../../schemas/trl.schema.json
[run]
batch_size = {batch}
seed = 0
total_steps = {steps}
eval_every = {max(1, steps // 6)}
checkpoint_every = {max(1, steps // 3)}

[[tasksets]]
name = "addition"
storage_type = "arithmetic"
size = 20000
levels = [1, 2, 3]

[tasksets.selector]
type = "random"

[trainer]
type = "trl"
model = "{EXAMPLE / 'tokenizer'}"
model_config = {model}
rows = "arithmetic"
reward = "prefix_match"
group_size = 8
max_completion_length = 5
max_prompt_length = 12
learning_rate = 0.001
eval_levels = [1, 2, 3]
eval_tasks_per_level = {eval_tasks}
"""


def main(argv: list[str] | None = None) -> int:
    """Write the pipeline, run ``flexkit compare`` over the three arms and three seeds, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "trl-gpu-ab", help="the comparison folder")
    parser.add_argument("--quick", action="store_true", help="a tiny model for a few steps (a CPU smoke run)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: 300, or 4 with --quick)")
    args = parser.parse_args(argv)
    steps = args.steps or (4 if args.quick else 300)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "pipeline.toml"
    path.write_text(pipeline_text(steps=steps, model=TINY if args.quick else MODEL, batch=8 if args.quick else 32,
                                  eval_tasks=8 if args.quick else 100), encoding="utf-8")
    batch = 8 if args.quick else 32
    replay = f"replay={{groups={batch // 2},max_age=2}}"
    settings = [
        "uniform:",
        f"uniform_replay:{replay}",
        f'learnability_replay:tasksets.0.selector={{type="learnability",feature_keys=["level"]}},{replay}',
        f'recipe:tasksets.0.selector={{type="frontier",feature_keys=["level"],retain=1.0,retain_above=0.9,'
        f'discount=0.99,guard_metric="val_accuracy/{{}}",guard_margin=0.03,guard_raise=0.5,guard_lower=0.05,'
        f'guard_min=0.5}},{replay}',
    ]
    command = [sys.executable, "-m", "flexkit", "compare", str(path), "--seeds", "0,1,2" if not args.quick else "0,",
               "--out", str(args.out / "compare")]
    for setting in settings:
        command += ["--set", setting]
    started = time.perf_counter()
    done = subprocess.run(command, check=False)
    print(f"flexkit compare: exit {done.returncode} after {time.perf_counter() - started:.0f} s; "
          f"report: {args.out / 'compare' / 'results.md'}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
