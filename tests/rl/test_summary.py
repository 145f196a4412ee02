"""parl.utils.summary writes TensorBoard event files that TensorBoard reads back."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from parl.utils import summary

from .conftest import RunPython


def read_events(logdir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    return accumulator


def test_scalars_and_histograms_are_read_back(summary_dir: Path) -> None:
    assert not summary_dir.exists()  # nothing is created before the first write
    for step, value in enumerate([0.5, 1.5, 2.25]):
        summary.add_scalar("train/return", value, step)
    summary.add_scalar("train/loss", np.float32(0.25), 7)
    summary.add_scalar("train/lr", torch.tensor(1e-3), 7)
    summary.add_histogram("weights", np.arange(10, dtype=np.float32), 3)
    summary.flush()
    assert summary.get_dir() == str(summary_dir)
    events = read_events(summary_dir)
    assert [(e.step, e.value) for e in events.Scalars("train/return")] == [
        (0, 0.5),
        (1, 1.5),
        (2, 2.25),
    ]
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(7, 0.25)]
    assert events.Scalars("train/lr")[0].value == pytest.approx(1e-3)
    histogram = events.Histograms("weights")[0]
    assert histogram.step == 3
    assert (histogram.histogram_value.min, histogram.histogram_value.max) == (0.0, 9.0)
    assert histogram.histogram_value.num == 10


def test_close_then_write_opens_a_new_file(summary_dir: Path) -> None:
    summary.add_scalar("a", 1.0, 0)
    summary.close()
    summary.close()  # idempotent
    summary.add_scalar("a", 2.0, 1)
    summary.flush()
    assert len(glob.glob(str(summary_dir / "events.out.tfevents.*"))) == 2
    assert [e.value for e in read_events(summary_dir).Scalars("a")] == [1.0, 2.0]


def test_bad_input_names_the_argument(summary_dir: Path) -> None:
    with pytest.raises(TypeError, match="tag must be a non-empty str"):
        summary.add_scalar("", 1.0)
    with pytest.raises(TypeError, match=r"scalar_value must be a real number, got '1' \(str\)"):
        summary.add_scalar("x", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="global_step must be an int or None, got 1.5"):
        summary.add_scalar("x", 1.0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="values must be numeric"):
        summary.add_histogram("h", ["a", "b"])
    assert not summary_dir.exists()
    summary_dir.parent.mkdir(parents=True, exist_ok=True)
    summary_dir.write_text("a file")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder: give another logdir"):
        summary.set_dir(summary_dir)


def test_default_folder_is_train_log_script_name(run_python: RunPython, tmp_path: Path) -> None:
    script = tmp_path / "cartpole_run.py"
    script.write_text(
        "import sys\n"
        "from parl.utils import summary\n"
        "assert 'torch' not in sys.modules and 'tensorboard' not in sys.modules\n"
        "summary.add_scalar('reward', 3.0, 1)\n"
    )
    proc = run_python(args=[str(script)])
    assert proc.returncode == 0, proc.stderr
    logdir = tmp_path / "train_log" / "cartpole_run"
    assert [(e.step, e.value) for e in read_events(logdir).Scalars("reward")] == [(1, 3.0)]


def test_parls_tensorboard_module_writes_each_value_to_disk_at_once(summary_dir: Path) -> None:
    """``from parl.utils import tensorboard`` (PARL's AlphaZero): the same event file as
    ``summary``, readable without a flush."""
    from parl.utils import tensorboard

    tensorboard.add_scalar("perfect_moves_rate", 0.5, 1)
    summary.add_scalar("perfect_moves_rate", 0.75, 2)  # one writer: the same file
    tensorboard.add_histogram("moves", np.arange(4, dtype=np.float32), 2)
    events = read_events(summary_dir)
    assert [(e.step, e.value) for e in events.Scalars("perfect_moves_rate")] == [
        (1, 0.5),
        (2, 0.75),
    ]
    assert events.Histograms("moves")[0].histogram_value.num == 4
    assert len(glob.glob(str(summary_dir / "events.out.tfevents.*"))) == 1
    tensorboard.flush()
    tensorboard.close()
    with pytest.raises(TypeError, match="tag must be a non-empty str"):
        tensorboard.add_scalar("", 1.0)
