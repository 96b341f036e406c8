"""The error every snapshot loading step raises: it names the record and the field."""

from __future__ import annotations


class LoadError(ValueError):
    """A snapshot that cannot be loaded. Nothing is changed when this is raised.

    `record` is e.g. "executions[12] (id 44444444-…)", `field` e.g. "startedAt".
    """

    def __init__(self, record: str, field: str, message: str) -> None:
        self.record = record
        self.field = field
        self.message = message
        where = f"{record}: {field}" if field else record
        super().__init__(f"{where}: {message}")
