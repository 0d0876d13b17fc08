"""Read a ``flexkit compare`` ``results.json`` back into its settings' runs, to draw several comparisons together
(``flexkit plot A/results.json B/results.json``): a protocol that splits its arms over several compare commands
gets one figure of them all."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from flexkit.compare._records import LEVEL_PREFIX
from flexkit.compare._results import RunOutcome, SettingResult
from flexkit.config._overrides import Setting
from flexkit.errors import ConfigError, FlexkitError

__all__ = ["SavedComparison", "merge_saved", "read_results", "short_labels", "source_label"]


@attrs.frozen
class SavedComparison:
    """One ``results.json``: its path, its targets and its settings (runs with their curves)."""

    path: Path
    targets: list[float]
    results: list[SettingResult]


class _Reader:
    """Checked reads from one file's JSON; every refusal is a :class:`~flexkit.errors.ConfigError` naming the file
    and the key path."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, where: str, what: str) -> ConfigError:
        return ConfigError(f"{self.file}: not a flexkit compare results.json ({where}: {what})")

    def table(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, "expected a table")
        return value

    def items(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, "expected a list")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"expected a number, got {value!r}")
        try:
            return float(value)
        except OverflowError:  # an int of hundreds of digits
            raise self.fail(where, "number too large") from None

    def integer(self, value: Any, where: str) -> int:
        number = self.number(value, where)
        if not number.is_integer():  # NaN and infinities included
            raise self.fail(where, f"expected an integer, got {value!r}")
        return int(number)

    def pairs(self, value: Any, where: str) -> list[tuple[int, float]]:
        out = []
        for i, pair in enumerate(self.items(value, where)):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{where}[{i}]", "expected an [x, y] pair")
            out.append((self.integer(pair[0], f"{where}[{i}]"), self.number(pair[1], f"{where}[{i}]")))
        return out

    def level_key(self, key: str, where: str) -> str:
        if not key.startswith(LEVEL_PREFIX):
            raise self.fail(f"{where}.{key}", f"expected a key {LEVEL_PREFIX}<level>")
        return key

    def run(self, value: Any, where: str) -> RunOutcome:
        data = self.table(value, where)
        levels = self.table(data.get("level_curves", {}), f"{where}.level_curves")
        final = self.table(data.get("final", {}), f"{where}.final")
        return RunOutcome(
            seed=self.integer(data.get("seed"), f"{where}.seed"), run_dir=Path(str(data.get("run_dir", ""))),
            curve=self.pairs(data.get("curve", []), f"{where}.curve"),
            final={str(k): self.number(v, f"{where}.final.{k}") for k, v in final.items() if v is not None},
            seconds=self.number(data.get("seconds", 0.0), f"{where}.seconds"),
            rollout_curve=self.pairs(data.get("rollout_curve", []), f"{where}.rollout_curve"),
            level_curves={self.level_key(str(k), f"{where}.level_curves"): self.pairs(v, f"{where}.level_curves.{k}")
                          for k, v in levels.items()},
        )

    def setting(self, value: Any, where: str) -> SettingResult:
        data = self.table(value, where)
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(f"{where}.name", "expected the setting's name")
        runs = [self.run(r, f"{where}.runs[{j}]") for j, r in enumerate(self.items(data.get("runs", []),
                                                                                   f"{where}.runs"))]
        per_step = self.integer(data.get("rollouts_per_step", 0), f"{where}.rollouts_per_step")
        return SettingResult(Setting(name, (), str(data.get("spec", ""))), per_step, runs)


def read_results(path: str | Path) -> SavedComparison:
    """Read ``path`` (a ``results.json``, or a compare folder holding one); raises
    :class:`~flexkit.errors.ConfigError` naming the file (and the key) when it is not a comparison's results."""
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    reader = _Reader(file)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{file}: not JSON ({exc})") from None
    table = reader.table(data, "the file")
    settings = [reader.setting(s, f"settings[{i}]") for i, s in enumerate(reader.items(table.get("settings"),
                                                                                          "settings"))]
    listed = reader.items(table.get("targets") or [], "targets")
    targets = [reader.number(t, f"targets[{i}]") for i, t in enumerate(listed)]
    if not targets and table.get("target") is not None:
        targets = [reader.number(table["target"], "target")]
    return SavedComparison(file, targets, settings)


def source_label(file: Path) -> str:
    """A results file's short name: its folder's for ``results.json``, else its own stem."""
    return (file.parent.name or file.stem) if file.name == "results.json" else file.stem


def short_labels(labels: Sequence[str]) -> list[str]:
    """``labels`` without the words they all start with (``frontier-addition-uniform``, ``frontier-addition-
    frontier``: ``uniform``, ``frontier``); unchanged when that would leave one empty or when there is one."""
    if len(labels) < 2:
        return list(labels)
    first = labels[0]
    length = next((i for i in range(len(first)) if any(len(x) <= i or x[i] != first[i] for x in labels)), len(first))
    prefix = first[:length]
    cut = max(prefix.rfind(sep) for sep in "-_. ") + 1
    shortened = [label[cut:] for label in labels]
    return shortened if all(shortened) else list(labels)


def merge_saved(saved: Sequence[SavedComparison]) -> list[SettingResult]:
    """Every setting of ``saved``, in order; a name met more than once is suffixed with its file's short name
    (``frontier (add-frontier)``, :func:`source_label`), so settings of the same name stay apart."""
    names = [res.setting.name for s in saved for res in s.results]
    labels = short_labels([source_label(s.path) for s in saved])
    merged = []
    for s, label in zip(saved, labels, strict=True):
        for res in s.results:
            name = res.setting.name
            if names.count(name) > 1:
                name = f"{name} ({label})"
            merged.append(SettingResult(Setting(name, res.setting.overrides, res.setting.spec),
                                        res.rollouts_per_step, res.runs, res.failures))
    return merged


def is_results_path(path: Path) -> bool:
    """Whether ``path`` names compare results: a ``.json`` file, or a folder holding ``results.json``."""
    return (path.is_file() and path.suffix == ".json") or (path.is_dir() and (path / "results.json").is_file())


def plot_saved(paths: Sequence[str | Path], out_dir: str | Path | None = None, *, dpi: int = 100) -> list[Path]:
    """Draw the settings of every comparison in ``paths`` together: ``accuracy.png`` (mean accuracy against steps
    and rollouts, with the first file's targets) and ``levels.png`` (one panel per level), into ``out_dir`` (default:
    ``plots/`` beside the first file). Raises :class:`~flexkit.errors.FlexkitError` without matplotlib, and
    :class:`~flexkit.errors.ConfigError` when no file holds a finished run."""
    from flexkit.compare._level_plot import write_level_plot
    from flexkit.compare._report import write_plot

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise FlexkitError('flexkit plot needs matplotlib: pip install "flexkit-rft[plot]"') from None
    saved = [read_results(p) for p in paths]
    results = merge_saved(saved)
    if not any(res.runs for res in results):
        raise ConfigError(f"nothing to draw: no finished run in {', '.join(str(s.path) for s in saved)}")
    out = Path(out_dir) if out_dir is not None else saved[0].path.parent / "plots"
    out.mkdir(parents=True, exist_ok=True)
    title = " + ".join(short_labels([source_label(s.path) for s in saved]))
    if len(title) > 80:
        title = f"{len(saved)} comparisons"
    written = [write_plot(results, saved[0].targets, out / "accuracy.png", title=title, progress=None, dpi=dpi),
               write_level_plot(results, out / "levels.png", title=title, progress=None, dpi=dpi)]
    return [p for p in written if p is not None]
