"""The memory backend's ``Records``: one dict per kind (docs/tenancy.md)."""

from __future__ import annotations


class MemoryRecords:
    """Records in process memory; lists sort the kind's keys each time (tenancy lists are small)."""

    def __init__(self) -> None:
        super().__init__()  # the other mixins of MemoryStore
        self._records: dict[str, dict[str, bytes]] = {}

    async def get_record(self, kind: str, key: str) -> bytes | None:
        return self._records.get(kind, {}).get(key)

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        records = self._records.setdefault(kind, {})
        if key in records:
            return False
        records[key] = value
        return True

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        self._records.setdefault(kind, {})[key] = value

    async def delete_record(self, kind: str, key: str) -> None:
        self._records.get(kind, {}).pop(key, None)

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        records = self._records.get(kind, {})
        keys = sorted(k for k in records if k >= start and (not end or k < end))
        return [(k, records[k]) for k in keys[:limit]]
