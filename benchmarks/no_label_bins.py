"""Where the no-label model puts each level: read a ``frontier`` run with ``text_key`` on a generated arithmetic
pool (``label = "none"``) from its run folder's last checkpoint.

    python benchmarks/no_label_bins.py runs/no-label/fresh-no-label/no-label/seed14 [RUN_DIR ...]

For each run: the quantile edges of the model's predicted pass rates, then per level (the larger operand's digit
count, read back from the zero-padded prompt) its tasks' mean and 10 / 50 / 90% predicted pass rate and how many of
them fall in each bin. A level whose tasks share a bin with tasks of levels far from it shares that bin's
informative rate, and so its draws. It prints what the checkpoint holds and asserts nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from flexkit.pipeline._pipeline import Pipeline, load_pipeline
from flexkit.selectors._prompt_model import text_column
from flexkit.selectors.frontier import FrontierSelector


def _levels(prompts: list[str]) -> np.ndarray:
    """The larger operand's digit count of each ``"000123+004567="`` prompt."""
    return np.array([max(len(str(int(operand))) for operand in text.rstrip("=").split("+")) for text in prompts])


def _pipeline(run_dir: Path) -> Pipeline:
    """The run's pipeline: a ``flexkit run`` folder's own ``pipeline.toml``, or for one seed's folder of ``flexkit
    compare`` the pipeline file its ``setting.json`` names (relative to the current directory), with the setting's
    overrides and the seed."""
    if (run_dir / "pipeline.toml").is_file():
        return load_pipeline(run_dir / "pipeline.toml")
    setting = json.loads((run_dir / "setting.json").read_text())
    overrides = setting["spec"].partition(":")[2]
    return load_pipeline(setting["pipeline"], overrides=[*([overrides] if overrides else []),
                                                         f"run.seed={setting['seed']}"])


def report(run_dir: Path) -> None:
    """Print one run's edges and per-level predictions and bins."""
    pipeline = _pipeline(run_dir)
    pipeline.load_checkpoint(run_dir / "checkpoint")
    selector = pipeline.scheduler.entries[0].selector
    if not isinstance(selector, FrontierSelector) or selector.model is None:
        raise SystemExit(f"{run_dir}: its first taskset's selector is not frontier with text_key")
    every = np.arange(selector.size)
    predicted = selector.model.predict(every)
    bins = selector.group_of(every)
    levels = _levels(list(text_column(selector.features, selector.config.text_key, selector.size, "no_label_bins")))
    print(f"{run_dir}: bin edges {np.round(selector.edges(), 3).tolist()}")
    for level in np.unique(levels):
        mine = levels == level
        q10, q50, q90 = np.quantile(predicted[mine], [0.1, 0.5, 0.9])
        counts = np.bincount(bins[mine], minlength=selector.config.bins).tolist()
        print(f"  level {level}: {mine.sum():5d} tasks, predicted mean {predicted[mine].mean():.3f} "
              f"(10/50/90%: {q10:.3f} / {q50:.3f} / {q90:.3f}), per bin {counts}")


def main(argv: list[str]) -> None:
    """Report each run folder of ``argv``."""
    if not argv:
        raise SystemExit(__doc__)
    for folder in argv:
        report(Path(folder))


if __name__ == "__main__":
    main(sys.argv[1:])
