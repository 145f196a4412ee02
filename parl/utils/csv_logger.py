"""``CSVLogger``: one row per ``log_dict`` call, columns fixed by the first row."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any

__all__ = ["CSVLogger"]


class CSVLogger:
    """Append dicts of results to a CSV file.

    The keys of the first dict become the header; a later dict may leave columns out (written
    empty) but may not add new ones. Parent folders are created, the file is opened on the first
    row and flushed after each row, so it can be read while training runs.

    Example::

        with CSVLogger("train_log/results.csv") as csv_logger:
            csv_logger.log_dict({"episode": 1, "return": 21.0})
    """

    def __init__(self, output_file: str | os.PathLike[str]) -> None:
        if not isinstance(output_file, (str, os.PathLike)):
            raise TypeError(
                f"output_file must be a str or os.PathLike, got {type(output_file).__name__}"
            )
        self.output_file = os.fspath(output_file)
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None
        self._fieldnames: list[str] | None = None
        self._closed = False

    @property
    def fieldnames(self) -> list[str] | None:
        """The columns, once the first row has been written."""
        return None if self._fieldnames is None else list(self._fieldnames)

    def log_dict(self, result: Mapping[str, Any]) -> None:
        """Write one row; values are written with ``str``."""
        if not isinstance(result, Mapping):
            raise TypeError(
                f"result must be a dict of column -> value, got {type(result).__name__}"
            )
        if self._closed:
            raise ValueError(f"CSVLogger for {self.output_file!r} is closed")
        if self._writer is None:
            self._fieldnames = [str(key) for key in result]
            parent = os.path.dirname(self.output_file)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._file = open(self.output_file, "w", newline="", encoding="utf-8")
            self._writer = csv.DictWriter(self._file, fieldnames=self._fieldnames)
            self._writer.writeheader()
        assert self._fieldnames is not None and self._file is not None
        unknown = [key for key in result if key not in self._fieldnames]
        if unknown:
            raise ValueError(
                f"result has keys {unknown} that are not columns of {self.output_file!r}; "
                f"the columns, fixed by the first row, are {self._fieldnames}"
            )
        self._writer.writerow(dict(result))
        self._file.flush()

    def flush(self) -> None:
        """Write buffered rows to the file (no-op once closed or before the first row)."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Close the file; idempotent. Logging after ``close`` raises ``ValueError``."""
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None

    def __enter__(self) -> CSVLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
