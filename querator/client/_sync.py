"""``Client``: the blocking client, an ``AsyncClient`` driven on a private event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self, TypeVar

from querator.client._arguments import ProduceItem, RetryItem
from querator.client._async import DEFAULT_ENDPOINT, AsyncClient
from querator.client._renew import keep_renewed
from querator.duration import parse_duration
from querator.errors import QueratorError
from querator.wire import messages as m

R = TypeVar("R", bound=m.Message)
T = TypeVar("T")


class Client:
    """The blocking client: an ``AsyncClient`` driven on a private event loop in a daemon thread.

    Thread-safe: calls from several threads run concurrently on the one loop and share the connection
    pool. Do not call it from the client's own callbacks (there are none) -- it would deadlock. Close it
    with ``close()`` or use it as a ``with`` context manager; a client left open keeps its thread (a daemon
    thread, so it never blocks interpreter exit). Arguments, return values and errors are those of
    ``AsyncClient``; its methods are documented there.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        api_key: str | None = None,
        protobuf: bool = False,
        timeout_margin: float = 1.0,
        *,
        limit: int = 100,
        limit_per_host: int = 0,
    ) -> None:
        self.aio = AsyncClient(
            endpoint, api_key, protobuf, timeout_margin, limit=limit, limit_per_host=limit_per_host
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="querator-client", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("querator client is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted (KeyboardInterrupt) or failed: make sure the call does not outlive us.
            future.cancel()
            raise

    def close(self) -> None:
        """Closes the session, stops the loop and joins its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.aio.close(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def call(self, path: str, msg: m.Message, reply_type: type[R], *, seconds: float | None = None) -> R:
        """See ``AsyncClient.call``."""
        return self._run(self.aio.call(path, msg, reply_type, seconds=seconds))

    def produce(self, queue_name: str, items: Sequence[ProduceItem], request_timeout: str = "1m") -> None:
        """See ``AsyncClient.produce``."""
        self._run(self.aio.produce(queue_name, items, request_timeout))

    def lease(
        self, queue_name: str, batch_size: int, client_id: str, request_timeout: str = "1m"
    ) -> m.QueueLeaseResponse:
        """See ``AsyncClient.lease``."""
        return self._run(self.aio.lease(queue_name, batch_size, client_id, request_timeout))

    def complete(
        self, queue_name: str, partition: int, ids: Sequence[str], request_timeout: str = "1m"
    ) -> None:
        """See ``AsyncClient.complete``."""
        self._run(self.aio.complete(queue_name, partition, ids, request_timeout))

    def retry(self, queue_name: str, partition: int, items: Sequence[RetryItem]) -> None:
        """See ``AsyncClient.retry``."""
        self._run(self.aio.retry(queue_name, partition, items))

    def renew(
        self,
        queue_name: str,
        partition: int,
        ids: Sequence[str],
        lease_timeout: str = "",
        request_timeout: str = "1m",
    ) -> m.QueueRenewResponse:
        """See ``AsyncClient.renew``."""
        return self._run(self.aio.renew(queue_name, partition, ids, lease_timeout, request_timeout))

    @contextlib.contextmanager
    def leased(
        self,
        queue_name: str,
        batch_size: int,
        client_id: str,
        request_timeout: str = "1m",
        lease_timeout: str = "",
    ) -> Iterator[m.QueueLeaseResponse]:
        """See ``AsyncClient.leased``; renewal runs on the client's own loop while the body works."""
        if lease_timeout:
            parse_duration(lease_timeout)
        lease = self.lease(queue_name, batch_size, client_id, request_timeout)
        ids = [i.id for i in lease.items]
        renewing = asyncio.run_coroutine_threadsafe(keep_renewed(self.aio, lease, lease_timeout), self._loop)
        try:
            yield lease
        except BaseException:
            renewing.cancel()
            with contextlib.suppress(QueratorError):
                self.retry(queue_name, lease.partition, ids)
            raise
        renewing.cancel()
        with contextlib.suppress(concurrent.futures.CancelledError):
            renewing.result()
        self.complete(queue_name, lease.partition, ids)

    def redrive(self, queue_name: str, target_queue: str, limit: int = 0, request_timeout: str = "1m") -> int:
        """See ``AsyncClient.redrive``."""
        return self._run(self.aio.redrive(queue_name, target_queue, limit, request_timeout))

    def cluster_info(self, queue_name: str = "", namespace: str = "") -> m.ClusterInfoResponse:
        """See ``AsyncClient.cluster_info``."""
        return self._run(self.aio.cluster_info(queue_name, namespace))

    def stats(self, queue_name: str) -> m.QueueStatsResponse:
        """See ``AsyncClient.stats``."""
        return self._run(self.aio.stats(queue_name))

    def clear(
        self, queue_name: str, queue: bool = False, scheduled: bool = False, destructive: bool = False
    ) -> None:
        """See ``AsyncClient.clear``."""
        self._run(self.aio.clear(queue_name, queue, scheduled, destructive))

    def reload(self, queue_name: str) -> None:
        """See ``AsyncClient.reload``."""
        self._run(self.aio.reload(queue_name))

    def create_queue(
        self,
        info: m.QueueInfo | str,
        *,
        lease_timeout: str | None = None,
        expire_timeout: str | None = None,
        max_attempts: int | None = None,
        dead_queue: str | None = None,
        reference: str | None = None,
        partitions: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """See ``AsyncClient.create_queue``."""
        self._run(
            self.aio.create_queue(
                info,
                lease_timeout=lease_timeout,
                expire_timeout=expire_timeout,
                max_attempts=max_attempts,
                dead_queue=dead_queue,
                reference=reference,
                partitions=partitions,
                namespace=namespace,
            )
        )

    def update_queue(self, info: m.QueueInfo) -> None:
        """See ``AsyncClient.update_queue``."""
        self._run(self.aio.update_queue(info))

    def delete_queue(self, name: str, force: bool = False) -> None:
        """See ``AsyncClient.delete_queue``."""
        self._run(self.aio.delete_queue(name, force))

    def queue_info(self, name: str) -> m.QueueInfo:
        """See ``AsyncClient.queue_info``."""
        return self._run(self.aio.queue_info(name))

    def list_queues(self, pivot: str = "", limit: int = 0, namespace: str = "") -> m.QueuesListResponse:
        """See ``AsyncClient.list_queues``."""
        return self._run(self.aio.list_queues(pivot, limit, namespace))

    def list_items(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """See ``AsyncClient.list_items``."""
        return self._run(self.aio.list_items(queue_name, partition, pivot, limit))

    def list_scheduled(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """See ``AsyncClient.list_scheduled``."""
        return self._run(self.aio.list_scheduled(queue_name, partition, pivot, limit))

    def import_items(
        self, queue_name: str, partition: int, items: Sequence[m.StorageItem]
    ) -> m.StorageItemsImportResponse:
        """See ``AsyncClient.import_items``."""
        return self._run(self.aio.import_items(queue_name, partition, items))

    def delete_items(self, queue_name: str, partition: int, ids: Sequence[str]) -> None:
        """See ``AsyncClient.delete_items``."""
        self._run(self.aio.delete_items(queue_name, partition, ids))

    def health(self) -> dict[str, Any]:
        """See ``AsyncClient.health``."""
        return self._run(self.aio.health())
