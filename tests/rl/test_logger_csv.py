"""parl.utils.logger (run in fresh interpreters: it is process-wide) and CSVLogger."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from parl.utils import CSVLogger

from .conftest import RunPython


def test_messages_go_to_the_console_and_not_the_root_logger(run_python: RunPython) -> None:
    proc = run_python(
        "import logging\n"
        "from parl.utils import logger\n"
        "print('after import', flush=True)\n"
        "logger.info('hello %s', 'world')\n"
        "logger.debug('hidden')\n"
        "logger.set_level('DEBUG')\n"
        "logger.debug('shown')\n"
        "logger.warning('careful')\n"
        "assert logging.getLogger().handlers == []\n"
        "assert len(logging.getLogger('parl').handlers) == 1\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "after import\n"
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    assert "<string>:4] hello world" in lines[0]  # the caller's file and line
    assert lines[1].endswith("] shown")
    assert lines[2].endswith("] WARNING careful")


def test_set_dir_appends_and_keeps_existing_files(run_python: RunPython, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "notes.txt").write_text("mine")
    (logdir / "log.log").write_text("old line\n")
    proc = run_python(
        "from parl.utils import logger\n"
        "assert logger.get_dir() is None\n"
        "logger.set_dir('logs')\n"
        "assert logger.get_dir() == 'logs'\n"
        "logger.info('new line')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert (logdir / "notes.txt").read_text() == "mine"
    content = (logdir / "log.log").read_text().splitlines()
    assert content[0] == "old line" and content[1].endswith("] new line")


def test_auto_set_dir_never_deletes(run_python: RunPython, tmp_path: Path) -> None:
    script = tmp_path / "my_train.py"
    script.write_text(
        "import sys\n"
        "from parl.utils import logger\n"
        "print(logger.auto_set_dir(action=sys.argv[1] if len(sys.argv) > 1 else None))\n"
    )
    old = tmp_path / "train_log" / "my_train"
    old.mkdir(parents=True)
    (old / "results.csv").write_text("precious")
    keep = run_python(args=[str(script)])
    assert keep.returncode == 0, keep.stderr
    assert keep.stdout.strip() == str(Path("train_log") / "my_train")
    assert (old / "results.csv").read_text() == "precious"
    delete = run_python(args=[str(script), "d"])  # PARL's "delete" moves the folder aside
    assert delete.returncode == 0, delete.stderr
    moved = [p for p in (tmp_path / "train_log").iterdir() if p.name.startswith("my_train-")]
    assert len(moved) == 1 and (moved[0] / "results.csv").read_text() == "precious"
    assert sorted(p.name for p in old.iterdir()) == ["log.log"]
    bad = run_python(args=[str(script), "x"])
    assert "action must be None, 'k', 'n', 'b' or 'd', got 'x'" in bad.stderr


def test_set_level_rejects_unknown_levels(run_python: RunPython) -> None:
    proc = run_python("from parl.utils import logger\nlogger.set_level('LOUD')\n")
    assert "level must be a logging level" in proc.stderr


def test_csv_logger(tmp_path: Path) -> None:
    path = tmp_path / "out" / "results.csv"
    with CSVLogger(path) as csv_logger:
        csv_logger.log_dict({"episode": 1, "return": 9.5})
        csv_logger.log_dict({"episode": 2})  # a missing column is written empty
        assert path.read_text().splitlines()[-1] == "2,"  # flushed row by row
        with pytest.raises(ValueError, match=r"keys \['loss'\] that are not columns"):
            csv_logger.log_dict({"episode": 3, "loss": 0.1})
    rows = list(csv.DictReader(path.open()))
    assert rows == [{"episode": "1", "return": "9.5"}, {"episode": "2", "return": ""}]
    with pytest.raises(ValueError, match="is closed"):
        csv_logger.log_dict({"episode": 4})
    with pytest.raises(TypeError, match="output_file must be a str"):
        CSVLogger(3)  # type: ignore[arg-type]
