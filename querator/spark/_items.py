"""Column mapping: turns the rows of one Spark task into produce items, and decides which rows are bad.

The mapping works on plain Python column lists (``pyarrow.Array.to_pylist()`` for the Arrow writers,
gathered ``Row`` values for the ``foreachPartition`` helper), so both paths share one set of rules:

- the payload is a ``str`` (sent as ``utf8``), ``bytes`` (sent as ``bytes``), or with ``payloadColumn=*``
  the whole row as a JSON object;
- ``reference``, ``kind``, ``encoding`` come from string columns (null means empty), ``enqueue_at`` from a
  timestamp column (null means now; naive values are UTC);
- ``dedup_id`` comes from ``dedupIdColumn`` or is ``<prefix><row position>``, the prefix naming the write
  and the task's partition (see ``_task.py``).

A row is **bad** when its payload is null or not a string/binary, its dedup id is null or longer than the
server accepts, or its estimated encoded size exceeds ``maxItemBytes``. Bad rows raise ``BadRowError``
unless the config says to skip them, in which case the caller counts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from querator.spark._config import WHOLE_ROW, SinkConfig
from querator.wire import messages as m

__all__ = ["MAX_DEDUP_ID", "BadRowError", "ItemMapper", "MappedItem"]

MAX_DEDUP_ID = 128
"""The server's limit on a ``dedup_id`` (characters), from docs/extensions.md."""
_ITEM_OVERHEAD = 96
"""Estimated bytes of JSON keys, quotes and commas around one item's fields."""
_JSON = "application/json"
_row_encoder = msgspec.json.Encoder()


class BadRowError(ValueError):
    """A row cannot become an item; the message says which row and why (``bad row; ...``)."""


@dataclass(frozen=True, slots=True)
class MappedItem:
    """One item ready to produce, with its estimated share of the request body."""

    item: m.QueueProduceItem
    size: int


def _payload_size(payload: bytes | str) -> int:
    if isinstance(payload, str):
        # Non-ASCII text is rare in bulk payloads; measuring it exactly costs an encode.
        return len(payload) if payload.isascii() else len(payload.encode())
    return 4 * ((len(payload) + 2) // 3)  # base64


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"enqueue_at must be a timestamp, not {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class ItemMapper:
    """Maps column lists of one task to items, following a ``SinkConfig``.

    Args:
        config: the sink's settings (columns, limits, bad-row policy).
        dedup_prefix: prefix of derived dedup ids (``<write>-<partition>-``), or None for no derived ids.
        where: names the task in bad-row messages, e.g. ``partition 3``.
    """

    def __init__(self, config: SinkConfig, dedup_prefix: str | None, where: str) -> None:
        self.config = config
        self.dedup_prefix = dedup_prefix if config.dedup and not config.dedup_id_column else None
        self.where = where
        self.whole_row = config.payload_column == WHOLE_ROW
        self.skipped = 0
        self.first_skip: str | None = None

    def needed_columns(self) -> list[str]:
        """The columns ``map`` reads, payload first (all of them for a whole-row payload)."""
        columns = [] if self.whole_row else [self.config.payload_column]
        return columns + [c for c in self.config.columns().values() if c not in columns]

    def map(
        self, payloads: Sequence[Any], fields: Mapping[str, Sequence[Any]], first_row: int
    ) -> list[MappedItem]:
        """Items for ``len(payloads)`` rows starting at position ``first_row`` of the task.

        Args:
            payloads: the payload column's values, or with ``payloadColumn=*`` one dict per row.
            fields: item field name (``reference``, ``kind``, ``encoding``, ``enqueue_at``,
                ``dedup_id``) -> that column's values, for the fields mapped from columns.
            first_row: the task-wide position of the first row (for derived dedup ids and messages).

        Returns:
            The items of the good rows, in row order.

        Raises:
            BadRowError: a bad row, unless bad rows are skipped.
        """
        references = fields.get("reference")
        kinds = fields.get("kind")
        encodings = fields.get("encoding")
        enqueue_ats = fields.get("enqueue_at")
        dedup_ids = fields.get("dedup_id")
        prefix = self.dedup_prefix
        limit = self.config.max_item_bytes
        out: list[MappedItem] = []
        for i, raw in enumerate(payloads):
            row = first_row + i
            payload: Any = _row_encoder.encode(raw) if self.whole_row and raw is not None else raw
            if payload is None:
                self._bad(row, f"payload is null (column {self.config.payload_column!r})")
                continue
            if isinstance(payload, bytearray | memoryview):
                payload = bytes(payload)
            if not isinstance(payload, bytes | str):
                self._bad(row, f"payload must be a string or binary, not {type(payload).__name__}")
                continue
            if dedup_ids is not None:
                dedup = dedup_ids[i]
                if dedup is None:
                    self._bad(row, f"dedup id is null (column {self.config.dedup_id_column!r})")
                    continue
                dedup = str(dedup)
            else:
                dedup = f"{prefix}{row}" if prefix is not None else ""
            if len(dedup) > MAX_DEDUP_ID:
                self._bad(row, f"dedup id is longer than {MAX_DEDUP_ID} characters ({len(dedup)})")
                continue
            reference = (references[i] or "") if references is not None else ""
            kind = (kinds[i] or "") if kinds is not None else ""
            encoding = (encodings[i] or "") if encodings is not None else (_JSON if self.whole_row else "")
            size = (
                _payload_size(payload)
                + len(dedup)
                + len(reference)
                + len(kind)
                + len(encoding)
                + _ITEM_OVERHEAD
            )
            if size > limit:
                self._bad(row, f"item is too large: about {size} encoded bytes, maxItemBytes is {limit}")
                continue
            try:
                enqueue_at = _utc(enqueue_ats[i]) if enqueue_ats is not None else None
            except TypeError as e:
                self._bad(row, str(e))
                continue
            item = m.QueueProduceItem(
                utf8=payload if isinstance(payload, str) else "",
                bytes=b"" if isinstance(payload, str) else payload,
                reference=reference,
                kind=kind,
                encoding=encoding,
                enqueue_at=enqueue_at,
                dedup_id=dedup,
            )
            out.append(MappedItem(item, size))
        return out

    def _bad(self, row: int, reason: str) -> None:
        message = f"bad row; {self.where} row {row}: {reason}"
        if not self.config.skip_bad_rows:
            raise BadRowError(message + " (set option onBadRow=skip to skip such rows)")
        self.skipped += 1
        if self.first_skip is None:
            self.first_skip = message
