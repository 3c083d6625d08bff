"""Querator in a FastAPI app (docs/frameworks.md): one client for the app's life, and a dependency.

::

    from querator.contrib.fastapi import QueratorClient, querator_lifespan

    app = FastAPI(lifespan=querator_lifespan(worker=worker))

    @app.post("/signups")
    async def signup(email: str) -> dict:
        return {"job": await send_welcome.enqueue(email)}      # the worker's client, on the app's loop

    @app.get("/backlog")
    async def backlog(client: QueratorClient) -> dict:      # the app's AsyncClient
        stats = await client.stats("emails")
        return {"waiting": sum(p.total - p.total_leased for q in stats.logical_queues for p in q.partitions)}
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request

from querator.client import DEFAULT_ENDPOINT, AsyncClient
from querator.worker import Worker

Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]


def querator_lifespan(
    endpoint: str | None = None,
    *,
    api_key: str | None = None,
    worker: Worker | None = None,
    then: Lifespan | None = None,
) -> Lifespan:
    """A FastAPI ``lifespan`` that opens an ``AsyncClient`` at start (``app.state.querator``, which
    ``QueratorClient`` hands to routes) and closes it at shutdown. With ``worker``: the queues of its
    ``create_queue`` tasks are made at start, and the worker's client of the app's loop (which its
    tasks' ``enqueue`` uses) is closed at shutdown.

    ``endpoint``: the node (default: the worker's when one is given, else ``QUERATOR_ENDPOINT``, else
    localhost); given with a worker, the worker is connected to it too. ``api_key``: its key (default:
    ``QUERATOR_API_KEY``). ``then``: the app's own lifespan, run inside this one.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        key = api_key if api_key is not None else os.environ.get("QUERATOR_API_KEY")
        if worker is not None and endpoint is not None:
            worker.connect(endpoint, api_key=key)
        where = endpoint or (worker.endpoint if worker else os.environ.get("QUERATOR_ENDPOINT"))
        async with AsyncClient(where or DEFAULT_ENDPOINT, api_key=key) as client:
            app.state.querator = client
            try:
                if worker is not None:
                    for task in worker.tasks.values():
                        await worker.client_for(task)  # the queues its tasks create, before any request
                if then is None:
                    yield
                else:
                    async with then(app):
                        yield
            finally:
                if worker is not None:
                    await worker.close()

    return lifespan


def querator_client(request: Request) -> AsyncClient:
    """The app's ``AsyncClient`` (opened by ``querator_lifespan``)."""
    client: Any = getattr(request.app.state, "querator", None)
    if not isinstance(client, AsyncClient):
        raise RuntimeError("no querator client: create the app with FastAPI(lifespan=querator_lifespan(...))")
    return client


QueratorClient = Annotated[AsyncClient, Depends(querator_client)]
"""A route's parameter of this type receives the app's ``AsyncClient``."""
