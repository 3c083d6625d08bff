"""Where a queue's requests go when the client reaches owners (``AsyncClient(reach_owners=True)``,
docs/adr/0040-clients-reach-partition-owners.md).

A cluster member serves a produce or lease itself when it owns a partition of the queue, and a complete,
retry or renew when it owns the partition named; anything else it forwards to an owner, one more hop.
The client asks ``cluster.info`` for the queue's owners and the serving members' advertised addresses,
keeps that map for ``REFRESH_S``, and sends each request straight to an owner. A map that went stale
costs nothing but the hop: the member it reaches forwards as for any client. A member that is gone (no
connection) or a 454 from an owner drops the map, and the next call reads it again. When the map cannot be
had (a node alone, a key without the stats permission, an older server) every request goes to the
endpoint, as without ``reach_owners``, until the next refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import count

from querator.errors import QueratorError
from querator.wire import messages as m

log = logging.getLogger(__name__)

REFRESH_S = 10.0
"""Seconds a queue's map is used before it is read again: how long a ring change may cost one hop."""
MAX_QUEUES = 1024
"""Queues whose maps are kept at once (all are dropped past it): bounds the memory of a client that
names many queues."""

Fetch = Callable[[str], Awaitable[m.ClusterInfoResponse]]
"""``cluster.info`` of one queue, at the client's endpoint."""


@dataclass(frozen=True, slots=True)
class _Map:
    """The base URL serving each partition of one queue, and those of its owners."""

    partitions: list[str]
    owners: list[str]
    until: float
    """Loop time after which the map is read again."""


class Owners:
    """The owner maps of the queues one client uses, read at most once at a time per queue."""

    def __init__(self, endpoint: str, fetch: Fetch) -> None:
        self._endpoint = endpoint
        self._scheme = endpoint.split("://", 1)[0]
        self._fetch = fetch
        self._maps: dict[str, _Map] = {}
        self._reading: dict[str, asyncio.Future[_Map]] = {}
        self._turn = count()

    async def queue_url(self, queue: str) -> str:
        """The base URL of a member owning some partition of ``queue`` (produce, lease): the owners in
        turn, so that the requests of one client spread over them."""
        owners = (await self._map(queue)).owners
        return owners[next(self._turn) % len(owners)]

    async def partition_url(self, queue: str, partition: int) -> str:
        """The base URL of the member owning ``partition`` of ``queue`` (complete, retry, renew)."""
        partitions = (await self._map(queue)).partitions
        return partitions[partition] if 0 <= partition < len(partitions) else self._endpoint

    def stale(self, queue: str, url: str) -> None:
        """``url``, taken from the map of ``queue``, failed a request: the map is read again next time."""
        if url != self._endpoint:
            self._maps.pop(queue, None)

    async def _map(self, queue: str) -> _Map:
        loop = asyncio.get_running_loop()
        found = self._maps.get(queue)
        if found is not None and found.until > loop.time():
            return found
        reading = self._reading.get(queue)
        if reading is None:
            # One reading per queue, whoever waits for it: a caller that gives up does not cancel it.
            reading = self._reading[queue] = loop.create_task(self._read(queue, loop.time() + REFRESH_S))
            reading.add_done_callback(lambda task: self._done(queue, task))
        return await asyncio.shield(reading)

    def _done(self, queue: str, reading: asyncio.Task[_Map]) -> None:
        del self._reading[queue]
        if reading.cancelled() or reading.exception() is not None:
            return  # the client closed: its callers got the error
        if len(self._maps) >= MAX_QUEUES:
            self._maps.clear()
        self._maps[queue] = reading.result()

    async def _read(self, queue: str, until: float) -> _Map:
        try:
            info = await self._fetch(queue)
        except QueratorError as e:
            # No map (403 without the stats permission, a node of an older version, no answer): the
            # endpoint serves everything, as without reach_owners, until the next reading.
            log.debug("no owner map of queue %s, using %s: %s", queue, self._endpoint, e)
            return _Map([], [self._endpoint], until)
        return self._parse(queue, info, until)

    def _parse(self, queue: str, info: m.ClusterInfoResponse, until: float) -> _Map:
        addresses = {s.node_id: s.address for s in info.members if s.state == "serving" and s.address}
        if len(addresses) < 2:
            # A node alone (or its processes, at their private addresses): nothing to gain.
            return _Map([], [self._endpoint], until)
        owners = {p.partition: p.owner for p in info.partitions if p.queue_name == queue}
        partitions = [self._url(addresses.get(owners.get(n, ""), "")) for n in range(len(owners))]
        serving = sorted({self._url(addresses[o]) for o in owners.values() if o in addresses})
        return _Map(partitions, serving or [self._endpoint], until)

    def _url(self, address: str) -> str:
        """The base URL of a member's advertised address; the endpoint for an owner that is not serving
        (it vanished and its grace period runs: the endpoint answers 454 for it as for anyone)."""
        return f"{self._scheme}://{address}" if address else self._endpoint
