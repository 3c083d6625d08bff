"""Checks, on the driver, that a DataFrame has the columns the sink's options name, with usable types.

Done before any task starts, so a misspelt column fails the job at once with a message naming the
option and the DataFrame's columns, rather than failing every task.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import BinaryType, StringType, TimestampNTZType, TimestampType

from querator.spark._config import WHOLE_ROW, SinkConfig, SinkConfigError

__all__ = ["check_schema"]


def check_schema(config: SinkConfig, schema: Any) -> None:
    """Fails on the driver when a mapped column is missing or has a type the mapping cannot take.

    Raises:
        SinkConfigError: naming the column and what was expected.
    """
    types = {f.name: f.dataType for f in schema.fields}

    def need(column: str, option: str, allowed: tuple[type, ...], what: str) -> None:
        if column not in types:
            raise SinkConfigError(
                f"option {option!r} names column {column!r}, which is not in the DataFrame "
                f"(columns: {', '.join(types) or 'none'})"
            )
        if not isinstance(types[column], allowed):
            raise SinkConfigError(
                f"column {column!r} ({option}) must be {what}, not {types[column].simpleString()}"
            )

    if config.payload_column != WHOLE_ROW:
        need(
            config.payload_column, "payloadColumn", (StringType, BinaryType), "string or binary (or use '*')"
        )
    text = (StringType,)
    for option, column in (
        ("referenceColumn", config.reference_column),
        ("kindColumn", config.kind_column),
        ("encodingColumn", config.encoding_column),
        ("dedupIdColumn", config.dedup_id_column),
    ):
        if column:
            need(column, option, text, "a string")
    if config.enqueue_at_column:
        need(config.enqueue_at_column, "enqueueAtColumn", (TimestampType, TimestampNTZType), "a timestamp")
