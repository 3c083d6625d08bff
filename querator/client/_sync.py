"""``Client``: the blocking client, each of its methods an ``AsyncClient`` method run on a private loop.

The methods are not written twice: ``_blocking`` turns a coroutine method of ``AsyncClient`` into a
blocking one (``_blocking_context`` does the same for an async context manager), keeping its name, its
documentation and, through ``ParamSpec``, its signature for type checkers; ``inspect.signature`` and
``help()`` follow ``__wrapped__`` to the ``AsyncClient`` method. A new ``AsyncClient`` method needs one
line here (tests/unit/client/test_client_sync.py fails until it has it).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from querator.client._async import DEFAULT_ENDPOINT, AsyncClient
from querator.client._loop import LoopThread
from querator.client._retries import DEFAULT_RETRIES, Retries

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """The ``Client`` method that runs the coroutine method ``method`` and returns its result."""

    @functools.wraps(method)
    def run(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self.aio, *args, **kwargs))

    return _client_method(run)


def _blocking_context(
    method: Callable[Concatenate[AsyncClient, P], AbstractAsyncContextManager[T]],
) -> Callable[Concatenate[Client, P], AbstractContextManager[T]]:
    """The ``Client`` method that returns ``method``'s async context manager as a ``with`` one."""

    @functools.wraps(method)
    def run(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> AbstractContextManager[T]:
        return _BlockingContext(self, method(self.aio, *args, **kwargs))

    # The async manager's return annotation (an AsyncIterator) is not this method's. (typeshed does not
    # declare __signature__, which inspect.signature reads before following __wrapped__.)
    signature = inspect.signature(method).replace(return_annotation=inspect.Signature.empty)
    run.__signature__ = signature  # type: ignore[attr-defined]
    return _client_method(run)


def _client_method(run: F) -> F:
    """``run`` (a wrapper of an ``AsyncClient`` method) named and placed as a method of ``Client``, so that
    its repr, ``help()`` and pickle find it there."""
    run.__module__ = __name__
    run.__qualname__ = f"Client.{run.__name__}"
    return run


class _BlockingContext(AbstractContextManager[T]):
    """An async context manager entered and exited on a ``Client``'s loop; the body runs in the caller's
    thread meanwhile, so tasks the manager started on entry (``leased``'s renewal) keep running."""

    def __init__(self, client: Client, manager: AbstractAsyncContextManager[T]) -> None:
        self._client = client
        self._manager = manager

    def __enter__(self) -> T:
        return self._client._run(self._manager.__aenter__())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return self._client._run(self._manager.__aexit__(exc_type, exc, tb))


class Client:
    """The blocking client: an ``AsyncClient`` driven on a private event loop in a daemon thread.

    Thread-safe: calls from several threads run concurrently on the one loop and share the connection
    pool. Do not call it from the client's own callbacks (there are none) -- it would deadlock. Close it
    with ``close()`` or use it as a ``with`` context manager; a client left open keeps its thread (a daemon
    thread, so it never blocks interpreter exit). Each method takes, returns and raises what the
    ``AsyncClient`` method of its name does, and has its documentation; ``leased`` is a ``with`` context
    manager here.
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
        retries: Retries | None = DEFAULT_RETRIES,
        reach_owners: bool = False,
    ) -> None:
        self.aio = AsyncClient(
            endpoint,
            api_key,
            protobuf,
            timeout_margin,
            limit=limit,
            limit_per_host=limit_per_host,
            retries=retries,
            reach_owners=reach_owners,
        )
        self._runner = LoopThread("querator client")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def close(self) -> None:
        """Closes the session, stops the loop and joins its thread. Idempotent."""
        self._runner.close(self.aio.close())

    # One line per AsyncClient method, in its order.
    call = _blocking(AsyncClient.call)
    produce = _blocking(AsyncClient.produce)
    lease = _blocking(AsyncClient.lease)
    lease_workflows = _blocking(AsyncClient.lease_workflows)
    complete = _blocking(AsyncClient.complete)
    retry = _blocking(AsyncClient.retry)
    renew = _blocking(AsyncClient.renew)
    leased = _blocking_context(AsyncClient.leased)
    lock = _blocking_context(AsyncClient.lock)
    semaphore = _blocking_context(AsyncClient.semaphore)
    set_limit = _blocking(AsyncClient.set_limit)
    take_rate = _blocking(AsyncClient.take_rate)
    redrive = _blocking(AsyncClient.redrive)
    cluster_info = _blocking(AsyncClient.cluster_info)
    stats = _blocking(AsyncClient.stats)
    clear = _blocking(AsyncClient.clear)
    reload = _blocking(AsyncClient.reload)
    create_queue = _blocking(AsyncClient.create_queue)
    update_queue = _blocking(AsyncClient.update_queue)
    delete_queue = _blocking(AsyncClient.delete_queue)
    queue_info = _blocking(AsyncClient.queue_info)
    list_queues = _blocking(AsyncClient.list_queues)
    list_items = _blocking(AsyncClient.list_items)
    list_scheduled = _blocking(AsyncClient.list_scheduled)
    import_items = _blocking(AsyncClient.import_items)
    delete_items = _blocking(AsyncClient.delete_items)
    health = _blocking(AsyncClient.health)
    create_schedule = _blocking(AsyncClient.create_schedule)
    update_schedule = _blocking(AsyncClient.update_schedule)
    put_schedule = _blocking(AsyncClient.put_schedule)
    schedule_info = _blocking(AsyncClient.schedule_info)
    list_schedules = _blocking(AsyncClient.list_schedules)
    delete_schedule = _blocking(AsyncClient.delete_schedule)
    pause_schedule = _blocking(AsyncClient.pause_schedule)
    resume_schedule = _blocking(AsyncClient.resume_schedule)
    start_workflow = _blocking(AsyncClient.start_workflow)
    workflow_info = _blocking(AsyncClient.workflow_info)
    workflow_journal = _blocking(AsyncClient.workflow_journal)
    list_workflows = _blocking(AsyncClient.list_workflows)
    signal_workflow = _blocking(AsyncClient.signal_workflow)
    update_workflow = _blocking(AsyncClient.update_workflow)
    cancel_workflow = _blocking(AsyncClient.cancel_workflow)
    terminate_workflow = _blocking(AsyncClient.terminate_workflow)
    resume_workflow = _blocking(AsyncClient.resume_workflow)
    fork_workflow = _blocking(AsyncClient.fork_workflow)
    workflow_result = _blocking(AsyncClient.workflow_result)
    claim_workflow = _blocking(AsyncClient.claim_workflow)
    append_workflow = _blocking(AsyncClient.append_workflow)
    create_namespace = _blocking(AsyncClient.create_namespace)
    update_namespace = _blocking(AsyncClient.update_namespace)
    list_namespaces = _blocking(AsyncClient.list_namespaces)
    delete_namespace = _blocking(AsyncClient.delete_namespace)
    create_user = _blocking(AsyncClient.create_user)
    list_users = _blocking(AsyncClient.list_users)
    delete_user = _blocking(AsyncClient.delete_user)
    create_api_key = _blocking(AsyncClient.create_api_key)
    list_api_keys = _blocking(AsyncClient.list_api_keys)
    delete_api_key = _blocking(AsyncClient.delete_api_key)
    create_role = _blocking(AsyncClient.create_role)
    update_role = _blocking(AsyncClient.update_role)
    list_roles = _blocking(AsyncClient.list_roles)
    delete_role = _blocking(AsyncClient.delete_role)
    create_role_binding = _blocking(AsyncClient.create_role_binding)
    list_role_bindings = _blocking(AsyncClient.list_role_bindings)
    delete_role_binding = _blocking(AsyncClient.delete_role_binding)
