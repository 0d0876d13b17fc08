"""flexkit_verl's sampler restore never unpickles: ``data.pt`` is read with ``torch.load(weights_only=True)``, so a
crafted file cannot run code, and a real loader state still restores the curriculum."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flexkit_verl")

from flexkit_verl import FlexkitSampler  # noqa: E402
from flexkit_verl.resume import restore_sampler  # noqa: E402

from flexkit import CheckpointError, FlexkitError, pipeline_from_dict  # noqa: E402 - after the skips


class _RunsCode:
    """Pickles to a call of ``os.system`` that leaves a trace file: loading it with pickle runs code."""

    def __init__(self, trace: Path) -> None:
        self.trace = trace

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.trace}",))


def _sampler(tmp_path: Path) -> FlexkitSampler:
    data = {"run": {"batch_size": 4, "seed": 5, "prefetch": False, "total_epochs": 2},
            "tasksets": [{"name": "s", "storage_type": "simulated", "size": 40}]}
    return FlexkitSampler(pipeline_from_dict(data, base_dir=tmp_path))


def test_regression_a_crafted_data_pt_runs_no_code(tmp_path: Path) -> None:
    """Regression: ``restore_sampler`` called ``torch.load(weights_only=False)`` on the checkpoint's ``data.pt``,
    so a crafted file ran code (docs/security.md promises flexkit never unpickles a checkpoint)."""
    trace = tmp_path / "ran"
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    torch.save({"_sampler_iter_state": {"sampler_state": {"x": _RunsCode(trace)}}}, folder / "data.pt")
    loader = SimpleNamespace(sampler=_sampler(tmp_path))
    with pytest.raises(CheckpointError, match=r"weights_only=True.*never unpickles"):
        restore_sampler(loader, str(folder))
    assert not trace.exists()


def test_a_sampler_state_saved_with_torch_restores(tmp_path: Path) -> None:
    sampler = _sampler(tmp_path)
    it = iter(sampler)
    drawn = [next(it) for _ in range(6)]
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    torch.save({"_sampler_iter_state": {"sampler_state": sampler.state_dict()}}, folder / "data.pt")
    rest = [next(it) for _ in range(10)]
    fresh = _sampler(tmp_path)
    assert restore_sampler(SimpleNamespace(sampler=fresh), str(folder))
    again = iter(fresh)
    assert [next(again) for _ in range(10)] == rest and drawn


def test_a_file_without_a_sampler_state_is_refused(tmp_path: Path) -> None:
    torch.save({"other": torch.zeros(2)}, tmp_path / "data.pt")
    with pytest.raises(FlexkitError, match="holds no sampler state"):
        restore_sampler(SimpleNamespace(sampler=_sampler(tmp_path)), str(tmp_path))
