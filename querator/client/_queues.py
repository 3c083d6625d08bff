"""The queue administration calls of ``AsyncClient``, mixed into it: create, change, read, list and delete
queues."""

from __future__ import annotations

from querator.client._arguments import Duration, new_queue_info
from querator.client._caller import Caller
from querator.wire import messages as m


class QueueAdminCalls(Caller):
    """The ``queues.*`` routes; a base of ``AsyncClient``, whose ``call`` sends them."""

    async def create_queue(
        self,
        info: m.QueueInfo | str,
        *,
        lease_timeout: Duration | None = None,
        expire_timeout: Duration | None = None,
        max_attempts: int | None = None,
        dead_queue: str | None = None,
        reference: str | None = None,
        partitions: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Creates a queue from a full ``QueueInfo``, or from a name and keyword settings.

        With a name, unset settings default to a lease timeout of ``1m``, an expire timeout of 60 times
        the lease timeout, 1 partition, unlimited attempts, no dead queue and the ``_system`` namespace.
        Keywords cannot be combined with a ``QueueInfo``.

        Raises:
            InvalidOption: the name is taken or invalid, a setting is invalid, the dead queue is missing.
            TypeError: keywords were given together with a ``QueueInfo``.
        """
        options = {
            "lease_timeout": lease_timeout,
            "expire_timeout": expire_timeout,
            "max_attempts": max_attempts,
            "dead_queue": dead_queue,
            "reference": reference,
            "partitions": partitions,
            "namespace": namespace,
        }
        if isinstance(info, m.QueueInfo):
            given = [k for k, v in options.items() if v is not None]
            if given:
                raise TypeError(f"create_queue: {', '.join(given)} cannot be combined with a QueueInfo")
        else:
            info = new_queue_info(
                info,
                lease_timeout=lease_timeout or "1m",
                expire_timeout=expire_timeout,
                max_attempts=max_attempts or 0,
                dead_queue=dead_queue or "",
                reference=reference or "",
                partitions=1 if partitions is None else partitions,
                namespace=namespace or "",
            )
        await self._reply_call("/v1/queues.create", info)

    async def update_queue(self, info: m.QueueInfo) -> None:
        """Changes a queue's settings, with the server's "replace" semantics.

        Empty ``lease_timeout``/``expire_timeout`` and a zero ``requested_partitions`` keep the current
        values, but ``dead_queue``, ``max_attempts`` and ``reference`` are always replaced: to change one
        setting, start from ``queue_info()`` and modify it (``msgspec.structs.replace``).

        Raises:
            InvalidOption: unknown queue, invalid setting, partitions decreased, lease > expire timeout.
        """
        await self._reply_call("/v1/queues.update", info)

    async def delete_queue(self, name: str, force: bool = False) -> None:
        """Deletes a queue and its items; its waiting requests get ``RequestFailed``.

        Raises:
            InvalidOption: invalid name or unknown queue.
        """
        await self._reply_call("/v1/queues.delete", m.QueuesDeleteRequest(queue_name=name, force=force))

    async def queue_info(self, name: str) -> m.QueueInfo:
        """The queue's current settings.

        Raises:
            InvalidOption: invalid name or unknown queue (``queue does not exist; ...``).
        """
        request = m.QueuesInfoRequest(queue_name=name)
        return await self.call("/v1/queues.info", request, m.QueueInfo, idempotent=True)

    async def list_queues(self, pivot: str = "", limit: int = 0, namespace: str = "") -> m.QueuesListResponse:
        """Queues of ``namespace`` (empty: ``_system``) by name, from the first name >= ``pivot``.

        ``limit`` 0 means the server's default (1000).

        Raises:
            InvalidOption: limit out of range or invalid pivot.
        """
        msg = m.QueuesListRequest(pivot=pivot, limit=limit, namespace=namespace)
        return await self.call("/v1/queues.list", msg, m.QueuesListResponse, idempotent=True)
