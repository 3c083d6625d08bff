"""The floor of a request on this stack: aiohttp on uvloop answering produce, lease and complete with no
queue behind them, for bench/load.py to drive the same way it drives a node.

Each handler reads the body, decodes it with the wire codec the server uses (JSON or protobuf by its
Content-Type), and encodes the reply the server would give: a 200 ``Reply`` (produce's with its ids), a
lease of ``batch_size`` 1 KiB items, or a complete's 200. What a node spends beyond this per request is
the queue's own work. It tunes the garbage collector as a node does (``querator.server``), so that
neither is measured with a cost the other does not pay.

    python bench/floor.py --port 2400
    python bench/floor.py --port 2400 --direct   # the v1 routes dispatched as the node does
    python bench/floor.py --port 2400 --direct --reply   # and replies written as the node writes them

``--direct`` hands a request for one of its routes, named by its exact path, straight to the route's
handler, skipping aiohttp's router and application step as the node does since ADR 0026. ``--reply``
writes each reply with the node's ``querator.http.Reply`` instead of aiohttp's ``web.Response``. With
both, this is the floor of a node that works that way (docs/benchmarks-log.md, "Small requests").
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import cast

import uvloop
from aiohttp import web
from aiohttp.typedefs import Handler

from querator.http import Reply
from querator.server import GC_THRESHOLD
from querator.wire import decode, encode
from querator.wire import messages as m

PAYLOAD = os.urandom(1024)
ID = "2a8Hb7uRwOsDHcQKsH2YyIxuZTG"
"""An item id as the node makes them (a KSUID), so replies are the node's size."""


Replier = Callable[[web.Request, m.Message], web.StreamResponse]


def routes(reply: Replier) -> dict[str, Handler]:
    """The floor's three routes, answering with ``reply``."""

    async def produce(request: web.Request) -> web.StreamResponse:
        req = decode(await request.read(), request.content_type, m.QueueProduceRequest)
        return reply(request, m.QueueProduceResponse(code=200, ids=[ID] * len(req.items)))

    async def lease(request: web.Request) -> web.StreamResponse:
        req = decode(await request.read(), request.content_type, m.QueueLeaseRequest)
        deadline = datetime.now(UTC)
        items = [
            m.QueueLeaseItem(id=ID, attempts=1, lease_deadline=deadline, bytes=PAYLOAD)
            for _ in range(req.batch_size)
        ]
        return reply(request, m.QueueLeaseResponse(queue_name=req.queue_name, items=items))

    async def complete(request: web.Request) -> web.StreamResponse:
        decode(await request.read(), request.content_type, m.QueueCompleteRequest)
        return reply(request, m.OK_REPLY)

    return {"/v1/queue.produce": produce, "/v1/queue.lease": lease, "/v1/queue.complete": complete}


async def health(request: web.Request) -> web.Response:
    """What the harness polls until the app is up."""
    return web.json_response({"status": "pass"})


def aiohttp_reply(request: web.Request, msg: m.Message) -> web.StreamResponse:
    body, content_type = encode(msg, request.headers.get("Accept"))
    return web.Response(body=body, content_type=content_type)


def node_reply(request: web.Request, msg: m.Message) -> web.StreamResponse:
    body, content_type = encode(msg, request.headers.get("Accept"))
    return Reply(body, content_type, 200)


async def serve(port: int, direct: bool, reply: Replier) -> None:
    app = web.Application()
    served = routes(reply)
    for path, handler in served.items():
        app.router.add_post(path, handler)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)  # aiohttp's defaults, as web.run_app's
    await runner.setup()
    if direct:
        assert runner.server is not None
        application = runner.server.request_handler

        def dispatch(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
            route = served.get(request.raw_path)
            return application(request) if route is None else route(cast(web.Request, request))

        runner.server.request_handler = dispatch
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()  # until terminated


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--direct", action="store_true", help="dispatch the routes without the router")
    parser.add_argument("--reply", action="store_true", help="write replies as the node does")
    args = parser.parse_args()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    uvloop.run(serve(args.port, args.direct, node_reply if args.reply else aiohttp_reply))


if __name__ == "__main__":
    main()
