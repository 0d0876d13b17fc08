"""``python -m flexkit_toyrl.write_pretrained PIPELINE.toml ...``: compute each pipeline's toyrl warm start and write
it where :func:`flexkit_toyrl.pretrained.load_shipped` finds it (the trainer imports :mod:`flexkit_toyrl.pretrained`;
this command imports the trainer, so the two stay apart)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import attrs

from flexkit import load_pipeline
from flexkit_toyrl.config import ToyRLConfig
from flexkit_toyrl.pretrained import PRETRAINED_DIR, save_warm_start
from flexkit_toyrl.trainer import ToyRLTrainer

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flexkit_toyrl.write_pretrained PIPELINE.toml ...``: compute and write each pipeline's warm start."""
    parser = argparse.ArgumentParser(prog="python -m flexkit_toyrl.write_pretrained", description=main.__doc__)
    parser.add_argument("pipelines", nargs="+", help="pipelines whose [trainer] is a toyrl table")
    parser.add_argument("--out-dir", type=Path, default=PRETRAINED_DIR, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    for source in args.pipelines:
        trainer_table = load_pipeline(source).config.trainer
        config = None if trainer_table is None else trainer_table.config
        if not isinstance(config, ToyRLConfig):
            parser.error(f"{source}: [trainer] is not a toyrl table")
        trainer = ToyRLTrainer(attrs.evolve(config, pretrained=False))
        path = save_warm_start(trainer, args.out_dir)
        print(f"{source}: {path} (warm-start loss {trainer.warmup_loss:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
