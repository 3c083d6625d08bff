"""The writer thread's connection and the partition keys it knows."""

from __future__ import annotations

import sqlite3

from querator.storage.sqlite._statements import SQL_INSERT_PARTITION, SQL_PARTITION_KEY


class Worker:
    """The connection and what goes with it. Used on the writer thread only."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.keys: dict[tuple[str, int], int] = {}
        """Partition keys known to be committed (or created by the open transaction, see new_keys)."""
        self.new_keys: list[tuple[str, int]] = []
        """Partitions created by the open transaction: forgotten again if it rolls back."""

    def partition_key(self, queue_name: str, number: int) -> int:
        """The partition's key, creating its row on first use (inside the current transaction)."""
        name = (queue_name, number)
        key = self.keys.get(name)
        if key is None:
            row = self.conn.execute(SQL_PARTITION_KEY, name).fetchone()
            if row is None:
                created = self.conn.execute(SQL_INSERT_PARTITION, name).lastrowid
                assert created is not None
                key = created
                self.new_keys.append(name)
            else:
                key = int(row[0])
            self.keys[name] = key
        return key

    def forget_new_keys(self, mark: int = 0) -> None:
        """Drops the keys created since ``mark`` after their rows were rolled back."""
        for name in self.new_keys[mark:]:
            self.keys.pop(name, None)
        del self.new_keys[mark:]
