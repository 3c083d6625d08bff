"""The memory backend's ``Records``: one dict per kind (docs/tenancy.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class MemoryRecords:
    """Records in process memory; lists sort the kind's keys each time (tenancy lists are small)."""

    def __init__(self) -> None:
        super().__init__()  # the other mixins of MemoryStore
        self._records: dict[str, dict[str, bytes]] = {}
        self._stamps: dict[tuple[str, str], int] = {}

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

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        for key, at in stamps.items():
            if at > self._stamps.get((kind, key), 0):
                self._stamps[kind, key] = at

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        return {key: self._stamps[kind, key] for key in keys if (kind, key) in self._stamps}

    async def delete_stamp(self, kind: str, key: str) -> None:
        self._stamps.pop((kind, key), None)
